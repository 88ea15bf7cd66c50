import type { ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { startPrivateRedis, type PrivateRedis } from '../../src/shared/redis-server.js';
import { spawnOrq, stopProcess, waitForOutput } from '../support/cli.js';
import { tempFilesPerFile } from '../support/temp-files.js';

const temp = tempFilesPerFile('orq-interrupt-');
const children: ChildProcess[] = [];
const servers: PrivateRedis[] = [];
afterEach(async () => {
  await Promise.all(children.splice(0).map((c) => stopProcess(c, 'SIGKILL')));
  await Promise.all(servers.splice(0).map((s) => s.stop()));
});

/** Output and exit code of `child` once it exits; `undefined` if it is still running at `ms`. */
function exitWithin(child: ChildProcess, ms: number): Promise<{ code: number | null } | undefined> {
  return new Promise((resolve) => {
    const timer = setTimeout(() => resolve(undefined), ms);
    child.once('exit', (code) => {
      clearTimeout(timer);
      resolve({ code });
    });
  });
}

function collect(child: ChildProcess): { text: () => string } {
  let text = '';
  child.stdout?.on('data', (chunk: Buffer) => (text += chunk.toString()));
  child.stderr?.on('data', (chunk: Buffer) => (text += chunk.toString()));
  return { text: () => text };
}

/** A Redis of the test's own, which the test can take away. */
async function ownRedis(): Promise<PrivateRedis> {
  const server = await startPrivateRedis({
    dir: join(temp.dir, `redis-${servers.length}`),
    appendonly: false,
  });
  servers.push(server);
  return server;
}

describe('Ctrl-C while Redis is gone', () => {
  it('orq run stops (its roles, its watch), says Redis is unreachable and exits', async () => {
    const redis = await ownRedis();
    // Slow model calls keep the session running when Redis goes away.
    const run = spawnOrq(['run', '--latency', '3000', 'a then b'], {
      env: { REDIS_URL: redis.url },
    });
    children.push(run);
    const output = collect(run);
    await waitForOutput(run, 'submitted');
    await redis.stop();
    run.kill('SIGINT');
    // The roles get their shutdown timeout (10 s) for the jobs they run; then it must be over.
    const exit = await exitWithin(run, 25_000);
    expect(exit, `still running 25 s after Ctrl-C:\n${output.text()}`).toBeDefined();
    expect(exit?.code).not.toBe(0);
    expect(output.text()).toContain('Redis is unreachable');
  }, 60_000);

  it('orq watch stops at once instead of waiting for Redis to come back', async () => {
    const redis = await ownRedis();
    const env = { REDIS_URL: redis.url };
    // A session nobody works on: submitted with no roles running, it stays PLANNING.
    const submit = spawnOrq(['submit', 'wait for me'], { env });
    children.push(submit);
    const submitted = collect(submit);
    expect(await exitWithin(submit, 20_000)).toEqual({ code: 0 });
    const id = /[0-9a-f-]{36}/.exec(submitted.text())?.[0];
    expect(id, submitted.text()).toBeDefined();

    const watch = spawnOrq(['watch', id!], { env });
    children.push(watch);
    const output = collect(watch);
    await waitForOutput(watch, 'PLANNING');
    await redis.stop();
    watch.kill('SIGINT');
    const exit = await exitWithin(watch, 10_000);
    expect(exit, `still running 10 s after Ctrl-C:\n${output.text()}`).toBeDefined();
    expect(exit?.code).not.toBe(0);
  }, 60_000);
});
