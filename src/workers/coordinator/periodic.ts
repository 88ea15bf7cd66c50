/**
 * Runs `task` now and then every `intervalMs` until stopped, one run at a time: a run that
 * outlasts the interval is not started again beside itself. The timer does not hold the process.
 */
export function startPeriodic(task: () => Promise<void>, intervalMs: number): () => void {
  let running = false;
  const run = async () => {
    if (running) return;
    running = true;
    try {
      await task();
    } finally {
      running = false;
    }
  };
  void run();
  const timer = setInterval(() => void run(), intervalMs);
  timer.unref();
  return () => clearInterval(timer);
}
