/**
 * A loader that runs once, on first use, and hands every caller the same promise: for
 * dependencies too heavy to load at start-up (an SDK, a client built on it). A failed load is
 * forgotten, so the next call tries again.
 */
export function loadOnce<T>(load: () => Promise<T>): () => Promise<T> {
  let loaded: Promise<T> | undefined;
  return () => {
    loaded ??= load().catch((error: unknown) => {
      loaded = undefined;
      throw error;
    });
    return loaded;
  };
}
