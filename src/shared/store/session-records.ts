import type { HistoryEntry, HistoryEntryDraft } from '../domain/history.js';
import type { Session, SessionState } from '../domain/session.js';
import type { Task } from '../domain/task.js';
import type { OutboxJob, UnsettledUsage } from '../queues.js';

/**
 * The shapes SessionStore reads and writes: a session or task as read, with the version a write
 * checks; a changeset and what its apply answered; a history entry as stored. The store's
 * modules all import these, and this one imports none of them.
 */

export interface Counters {
  /** Tasks not yet in a finished state. */
  open: number;
  /** Tasks dispatched to a worker or waiting for the Replanner. */
  active: number;
}

export interface SessionSnapshot {
  session: Session;
  version: number;
  counters: Counters;
}

export interface TaskSnapshot {
  task: Task;
  /** 0 when the task does not exist yet. */
  version: number;
}

/** What SessionStore.loadForTask read in one round trip. */
export interface TaskWorkRead {
  /** Undefined when the session does not exist. */
  snapshot: SessionSnapshot | undefined;
  tasks: Map<string, TaskSnapshot>;
  /** Tasks still at the version the caller holds: not sent. */
  unchanged: Set<string>;
  /** The fence the read took for a work delivery (absent: no session, or none asked). */
  fence?: number;
}

/** Everything one transition changes, applied atomically by APPLY_SCRIPT. */
export interface Changeset {
  /** Deterministic id of the event; a second apply with the same id is a no-op. */
  eventId: string;
  /** Apply only while the session is in one of these states. */
  requireStates?: SessionState[];
  /** Replace the session record; requires its version to still be `expectedVersion`. */
  session?: { record: Session; expectedVersion: number };
  /** Task records to write, each with the version it had when read (0 = new). */
  tasks?: TaskSnapshot[];
  /** Versions that must be unchanged even though the task is not written. */
  readTasks?: TaskSnapshot[];
  requireCounters?: Partial<Counters>;
  counters?: Partial<Counters>;
  outbox?: OutboxJob[];
  history?: HistoryEntryDraft[];
  /** Model calls whose usage came with the event: counted by this write, so only once. */
  unsettledUsage?: readonly UnsettledUsage[];
  /**
   * The session's budget was raised (a resume after BUDGET_EXHAUSTED): its usage forgets the
   * refusal, and processes that keep the session's submit-time parts read the record again.
   */
  budgetRaised?: boolean;
  /**
   * The session's scheduling.maxTasksInFlight when this transition filled its slots: the write
   * is refused (CONFLICT) if it would leave more tasks active, or a slot free while a task
   * waits (APPLY_SCRIPT). Unset: no check (the transition dispatched nothing new).
   */
  slotLimit?: number;
  /**
   * The fence the work delivery behind this event took (keys.ts `fences`): the write is refused
   * (FENCED) if a later delivery of the task attempt took a higher one since.
   */
  fence?: { taskId: string; attempt: number; value: number };
}

export type ApplyStatus =
  'OK' | 'DUPLICATE' | 'STATE' | 'CONFLICT' | 'COUNTERS' | 'FENCED' | 'GONE';

export interface ApplyResult {
  status: ApplyStatus;
  counters: Counters;
}

export interface StoredHistoryEntry {
  /** Redis stream id, usable as a cursor. */
  id: string;
  entry: HistoryEntry;
}

/** One recorded step of an agent run (see SessionStore.appendTaskStep). */
export interface TaskStepRecord {
  step: number;
  entry: HistoryEntry;
  /** The plan in force after this step, recorded on plan and revision steps. */
  plan?: unknown;
}
