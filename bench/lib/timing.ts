import { performance } from 'node:perf_hooks';

export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** High-resolution milliseconds (monotonic). */
export const now = () => performance.now();

/** Node CPU (user + system) in ms since `since` (a process.cpuUsage() reading). */
export function cpuMsSince(since: NodeJS.CpuUsage): number {
  const d = process.cpuUsage(since);
  return (d.user + d.system) / 1000;
}

/** Polls `check` until it returns true; throws after `timeoutMs`. */
export async function waitUntil(
  check: () => boolean | Promise<boolean>,
  what: string,
  timeoutMs = 60_000,
  intervalMs = 10,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline)
      throw new Error(`timed out after ${timeoutMs}ms waiting for ${what}`);
    await sleep(intervalMs);
  }
}
