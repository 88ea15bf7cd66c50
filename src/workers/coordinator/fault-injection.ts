/**
 * Fault injection for the reliability tests (issue 7), never for production use.
 *
 * `ORQ_FAULT_CRASH_AFTER_APPLY=n` makes a coordinator process kill itself with SIGKILL right
 * after its n-th successful state write, before it enqueues the jobs that write put in the
 * outbox: exactly the crash between "state written" and "next job enqueued" that DESIGN.md's
 * invariants must survive. The variable is read once; unset (or not a positive whole number)
 * the hook is a single comparison per event.
 */
export const FAULT_CRASH_AFTER_APPLY = 'ORQ_FAULT_CRASH_AFTER_APPLY';

function crashThreshold(value: string | undefined): number {
  const n = Number(value);
  return Number.isInteger(n) && n > 0 ? n : 0;
}

const crashAfter = crashThreshold(process.env[FAULT_CRASH_AFTER_APPLY]);
let writes = 0;

/** Called by applyEvent after each state write it made; crashes the process when due. */
export function faultAfterStateWrite(): void {
  if (crashAfter === 0) return;
  writes += 1;
  if (writes >= crashAfter) process.kill(process.pid, 'SIGKILL');
}
