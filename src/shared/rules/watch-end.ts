import {
  FINISHED_SESSION_STATES,
  REQUEST_SETTLED_STATES,
  type SessionState,
} from '../domain/session.js';

/** What a watch of a session waits for: its end, or also a stop for a person (BLOCKED, AWAITING_APPROVAL). */
export type WatchUntil = 'finished' | 'settled';

/**
 * Whether a watch of a session in `state` is over: the session is gone, finished, or (until
 * `settled`) BLOCKED or AWAITING_APPROVAL. Not while a resume or cancel waits for the coordinator (`requestPending`)
 * in a state it moves on from: a watch started right after `orq resume` (or a cancel of a
 * BLOCKED session) would otherwise end at the state from before it.
 */
export function watchEnds(
  state: SessionState | undefined,
  until: WatchUntil,
  requestPending: boolean,
): boolean {
  if (state === undefined) return true;
  const stopped =
    FINISHED_SESSION_STATES.includes(state) ||
    (until === 'settled' && (state === 'BLOCKED' || state === 'AWAITING_APPROVAL'));
  return stopped && !(requestPending && REQUEST_SETTLED_STATES.includes(state));
}
