import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { minimalEnv, runProcess } from '../../src/workers/executors/process.js';

let dir: string;
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'orq-run-process-'));
});
afterEach(() => {
  // The escaped process of a test, if it still runs.
  const pidFile = join(dir, 'escaped.pid');
  if (existsSync(pidFile)) {
    try {
      process.kill(Number(readFileSync(pidFile, 'utf8').trim()), 'SIGKILL');
    } catch {
      // Already gone.
    }
  }
  rmSync(dir, { recursive: true, force: true });
});

/** Real processes through sh, in `dir`. */
const run = (script: string, options: { timeoutMs?: number; signal?: AbortSignal } = {}) =>
  runProcess(['sh', '-c', script], {
    cwd: dir,
    timeoutMs: options.timeoutMs ?? 10_000,
    maxOutputBytes: 4096,
    env: minimalEnv(),
    ...(options.signal ? { signal: options.signal } : {}),
  });

/**
 * Starts, with setsid, a process outside the command's process group that keeps the command's
 * output open for 20 s and then leaves `escaped.done`; its pid is in `escaped.pid`.
 */
const ESCAPE = `setsid sh -c 'echo $$ > escaped.pid; sleep 20; touch escaped.done' & sleep 0.3;`;
const escapedEnded = () => existsSync(join(dir, 'escaped.done'));

describe('runProcess', () => {
  it('reports the exit code and the output', async () => {
    const outcome = await run('echo hello; echo oops >&2; exit 3');
    expect(outcome).toMatchObject({ exitCode: 3, timedOut: false, aborted: false });
    expect(outcome.output).toContain('hello');
    expect(outcome.output).toContain('oops');
  });

  it('ends at its timeout though a process that left its group holds the output open', async () => {
    const outcome = await run(`${ESCAPE} sleep 100`, { timeoutMs: 1_000 });
    expect(outcome).toMatchObject({ exitCode: null, timedOut: true });
    expect(escapedEnded()).toBe(false);
  });

  it('ends at a cancel though a process that left its group holds the output open', async () => {
    const controller = new AbortController();
    setTimeout(() => controller.abort(), 1_000);
    const outcome = await run(`${ESCAPE} sleep 100`, { signal: controller.signal });
    expect(outcome).toMatchObject({ exitCode: null, aborted: true, timedOut: false });
    expect(escapedEnded()).toBe(false);
  });

  it('reports a clean exit as such, not as a timeout, when something it left holds the output', async () => {
    const outcome = await run(`${ESCAPE} echo started; exit 0`, { timeoutMs: 3_000 });
    expect(outcome).toMatchObject({ exitCode: 0, timedOut: false, aborted: false });
    expect(outcome.output).toContain('started');
    expect(escapedEnded()).toBe(false);
  });

  it('says a working directory removed meanwhile is gone, not that the program is missing', async () => {
    const gone = join(dir, 'removed');
    const outcome = await runProcess(['sh', '-c', 'true'], {
      cwd: gone,
      timeoutMs: 10_000,
      maxOutputBytes: 4096,
      env: minimalEnv(),
    });
    expect(outcome.spawnError).toContain(`its working directory ${gone} does not exist`);
  });

  it('still says a program not on PATH is missing', async () => {
    const outcome = await runProcess(['orq-no-such-program'], {
      cwd: dir,
      timeoutMs: 10_000,
      maxOutputBytes: 4096,
      env: minimalEnv(),
    });
    expect(outcome.spawnError).toContain('spawn orq-no-such-program ENOENT');
    expect(outcome.spawnError).not.toContain('working directory');
  });
});
