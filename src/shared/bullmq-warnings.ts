/** BullMQ's warning, written with console.warn by every connection it opens. */
const EVICTION_WARNING = /^IMPORTANT! Eviction policy is /;

let muted = false;

/**
 * Drops BullMQ's eviction-policy warning from console.warn. BullMQ writes it once per
 * connection (15 plain lines as a pod starts, 5 per CLI command) in the middle of pino's JSON
 * lines; orq checks the policy once and logs it structured instead (checkEvictionPolicy).
 * Only that message is dropped; every other console.warn goes through. Idempotent.
 */
export function muteBullmqEvictionWarnings(): void {
  if (muted) return;
  muted = true;
  const warn = console.warn;
  console.warn = (...args: unknown[]) => {
    if (typeof args[0] === 'string' && EVICTION_WARNING.test(args[0])) return;
    warn.apply(console, args);
  };
}
