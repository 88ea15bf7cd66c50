/**
 * A reader that goes away (`orq history <id> | head -1`) ends the output; it is not a crash.
 * A command that runs roles must not just exit then: its jobs would be left to their locks, its
 * private Redis running and its session unsaid. It holds stdout while it runs and registers how
 * it stops, and stops as on Ctrl-C.
 */
export interface StdoutGuard {
  /** The command runs until the returned release: a closed stdout does not exit it meanwhile. */
  hold(): () => void;
  /** Calls `stop` once stdout's reader is gone (at once if it is gone already); returns the undo. */
  onClosed(stop: () => void): () => void;
  /** The stdout 'error' listener: a closed pipe stops the command, anything else is thrown. */
  handleError(error: NodeJS.ErrnoException): void;
}

export function createStdoutGuard(exit: (code: number) => void): StdoutGuard {
  const stoppers = new Set<() => void>();
  let holders = 0;
  let closed = false;
  return {
    hold() {
      holders += 1;
      let released = false;
      return () => {
        if (!released) holders -= 1;
        released = true;
      };
    },
    onClosed(stop) {
      if (closed) {
        stop();
        return () => undefined;
      }
      stoppers.add(stop);
      return () => stoppers.delete(stop);
    },
    handleError(error) {
      if (error.code !== 'EPIPE' && error.code !== 'ERR_STREAM_DESTROYED') throw error;
      // Every later write fails too: only the first one decides.
      if (closed) return;
      closed = true;
      if (holders === 0 && stoppers.size === 0) exit(0);
      for (const stop of stoppers) stop();
    },
  };
}

const guard = createStdoutGuard((code) => process.exit(code));

export const holdStdout = guard.hold;
export const onStdoutClosed = guard.onClosed;
export const handleStdoutError = guard.handleError;

/** Runs `fn` with stdout held (see StdoutGuard.hold). */
export async function withStdoutHeld<T>(fn: () => Promise<T>): Promise<T> {
  const release = holdStdout();
  try {
    return await fn();
  } finally {
    release();
  }
}
