/**
 * Waits for `promise` for `ms` at most: true if it fulfilled in time, false if the time ran out
 * (a rejection passes through). The timer does not keep the process alive.
 */
export const settlesWithin = (promise: Promise<unknown>, ms: number): Promise<boolean> =>
  Promise.race([
    promise.then(() => true),
    new Promise<boolean>((r) => setTimeout(() => r(false), ms).unref()),
  ]);
