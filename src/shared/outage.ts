/**
 * A Redis outage as one connection's log tells it. ioredis reports every failed reconnect
 * (a pod's connections each try every 2 s at most), which buried a pod's log under a warning
 * per connection per try and never said when Redis was back. Told here instead: once when it
 * starts, again every `repeatEveryMs` while it lasts, and once when the connection is ready.
 */
export type OutageState =
  | { down: false }
  | {
      down: true;
      /** When the first error came (ms since the epoch). */
      since: number;
      /** Errors seen since then, the first one included. */
      errors: number;
      /** When the outage was last reported. */
      reportedAt: number;
    };

export type OutageEvent =
  { type: 'error'; error: string; at: number } | { type: 'ready'; at: number };

export type OutageReport =
  | { kind: 'down'; error: string }
  | { kind: 'still-down'; error: string; errors: number; downForMs: number }
  | { kind: 'restored'; errors: number; downForMs: number };

export const UP: OutageState = { down: false };

/** The next state, and what to log for this event, if anything. */
export function nextOutage(
  state: OutageState,
  event: OutageEvent,
  repeatEveryMs: number,
): { state: OutageState; report?: OutageReport } {
  if (event.type === 'ready') {
    if (!state.down) return { state };
    return {
      state: UP,
      report: { kind: 'restored', errors: state.errors, downForMs: event.at - state.since },
    };
  }
  if (!state.down) {
    return {
      state: {
        down: true,
        since: event.at,
        errors: 1,
        reportedAt: event.at,
      },
      report: { kind: 'down', error: event.error },
    };
  }
  const errors = state.errors + 1;
  if (event.at - state.reportedAt < repeatEveryMs) {
    return { state: { ...state, errors } };
  }
  return {
    state: { ...state, errors, reportedAt: event.at },
    report: { kind: 'still-down', error: event.error, errors, downForMs: event.at - state.since },
  };
}
