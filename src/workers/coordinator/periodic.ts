import type { Logger } from '../../shared/logger.js';

/**
 * Runs `task` now and then every `intervalMs` until stopped, one run at a time: a run that
 * outlasts the interval is not started again beside itself. A run that fails is logged as
 * `<what> failed; will retry`. The timer does not hold the process.
 */
export function startPeriodic(
  what: string,
  task: () => Promise<void>,
  options: { intervalMs: number; logger: Logger },
): () => void {
  let running = false;
  const run = async () => {
    if (running) return;
    running = true;
    try {
      await task();
    } catch (error) {
      options.logger.warn({ err: (error as Error).message }, `${what} failed; will retry`);
    } finally {
      running = false;
    }
  };
  void run();
  const timer = setInterval(() => void run(), options.intervalMs);
  timer.unref();
  return () => clearInterval(timer);
}
