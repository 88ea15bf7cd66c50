import { FINISHED_SESSION_STATES, type SessionState } from '../domain/session.js';

/** What retention knows of a session: its state and when it last moved, or was asked to. */
export interface SessionActivity {
  /** Absent: the session's record is gone (its index entry is left over). */
  state?: SessionState;
  /** Time of the session's last history entry (ms since the epoch). */
  lastActivityMs?: number;
  /**
   * When the newest resume recorded and not applied yet was enqueued (ms since the epoch).
   * Such a resume writes no history until the coordinator applies it, yet someone just asked
   * for the session to go on (a BUDGET_EXHAUSTED one with a higher budget).
   */
  pendingResumeMs?: number;
}

export interface PruneRule {
  /** Sessions whose last activity is older than this (ms since the epoch) may go. */
  cutoffMs: number;
  /** Only sessions in these states (finished ones only; every finished state by default). */
  states?: readonly SessionState[];
}

export type PruneVerdict =
  | 'delete'
  /** The index names a session whose record is gone: drop the entry. */
  | 'unindex'
  | 'keep';

/**
 * Whether retention deletes a session. Only a finished session goes, and only once nothing has
 * happened in it for the rule's age: a session created long ago that finished a minute ago is
 * kept, so its result can still be read. A resume enqueued since the cutoff and not applied yet
 * counts as activity; an older one does not, so a resume whose job is long gone (never to be
 * applied) does not keep the session for ever.
 */
export function pruneVerdict(session: SessionActivity, rule: PruneRule): PruneVerdict {
  if (session.state === undefined) return 'unindex';
  const states = rule.states ?? FINISHED_SESSION_STATES;
  if (!FINISHED_SESSION_STATES.includes(session.state) || !states.includes(session.state)) {
    return 'keep';
  }
  if (session.lastActivityMs === undefined) return 'keep';
  const lastActivityMs = Math.max(session.lastActivityMs, session.pendingResumeMs ?? -Infinity);
  return lastActivityMs >= rule.cutoffMs ? 'keep' : 'delete';
}

/** States a prune may name: finished ones. Returns those that are not. */
export function unfinishedStates(states: readonly SessionState[]): SessionState[] {
  return states.filter((s) => !FINISHED_SESSION_STATES.includes(s));
}
