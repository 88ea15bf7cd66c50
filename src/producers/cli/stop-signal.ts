// The stop signal of `orq start`, listened for from the entry (main.ts) on, before the CLI's
// modules load: a SIGTERM in a pod's first second (a rollout that changes its mind) killed it
// by the signal, where the pod must stop as it does later (exit 0).

let received: string | undefined;
let listening: Promise<string> | undefined;

/**
 * The first SIGTERM or SIGINT, from the first call on (main.ts calls it first for `start`); a
 * second one ends the process by the signal, as without a listener. The listeners stay rather
 * than `once`: signal-exit (loaded with proper-lockfile) re-raises a signal it finds no other
 * listener for, which killed a pod whose `once` listener had just removed itself.
 */
export function listenForStop(): Promise<string> {
  listening ??= new Promise<string>((resolve) => {
    const stop = (signal: NodeJS.Signals) => {
      if (received) {
        process.removeListener('SIGTERM', stop);
        process.removeListener('SIGINT', stop);
        process.kill(process.pid, signal);
        return;
      }
      received = signal;
      resolve(signal);
    };
    process.on('SIGTERM', stop);
    process.on('SIGINT', stop);
  });
  return listening;
}

/** The stop signal received so far, if any. */
export const stopReceived = (): string | undefined => received;
