/**
 * A reader that goes away (`orq history <id> | head -1`) ends the output; it is not a crash.
 * A command that runs roles must not just exit then: its jobs would be left to their locks
 * and its session unsaid. It registers how it stops, and stops as on Ctrl-C.
 */
const stoppers = new Set<() => void>();
let closed = false;

/** Calls `stop` if stdout's reader goes away; returns the undo. */
export function onStdoutClosed(stop: () => void): () => void {
  stoppers.add(stop);
  return () => stoppers.delete(stop);
}

/** The stdout 'error' listener: a closed pipe stops the command, anything else is thrown. */
export function handleStdoutError(error: NodeJS.ErrnoException): void {
  // A write after the pipe closed fails as a destroyed stream, not EPIPE again.
  if (error.code !== 'EPIPE' && error.code !== 'ERR_STREAM_DESTROYED') throw error;
  // Later writes fail too: they must not cut short the shutdown the first one started.
  if (closed) return;
  closed = true;
  if (stoppers.size === 0) process.exit(0);
  for (const stop of stoppers) stop();
}
