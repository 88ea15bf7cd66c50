import type { ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { redisAnswers } from '../../src/shared/redis-server.js';
import { orq, root, spawnOrq, stopProcess, waitForOutput } from '../support/cli.js';
import { tempFilesPerFile } from '../support/temp-files.js';
import { startTestRedis, type TestRedis } from '../support/test-redis.js';
import { allNeedRedisServer, needsRedisServer } from '../support/redis-binary.js';

const temp = tempFilesPerFile('orq-interrupt-');
const children: ChildProcess[] = [];
const servers: TestRedis[] = [];
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
async function ownRedis(): Promise<TestRedis> {
  const server = await startTestRedis({
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
    // Where it was looked for, in words: `Redis at 127.0.0.1:PORT is unreachable (…)`.
    expect(output.text()).toContain(`Redis at ${new URL(redis.url).host} is unreachable`);
    expect(output.text()).not.toMatch(/enableOfflineQueue|Stream isn't writeable/);
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

/** The private server `orq` recorded in `dir`/.orq/redis/server.json. */
function privateServer(dir: string): { url: string; pid: number } {
  return JSON.parse(readFileSync(join(dir, '.orq/redis/server.json'), 'utf8')) as {
    url: string;
    pid: number;
  };
}

describe('a reader that goes away (orq run … | head -1)', () => {
  it('stops orq run as a Ctrl-C does: its roles shut down and it exits 130, not 0', async () => {
    const redis = await ownRedis();
    const run = spawnOrq(['run', '--latency', '1500', 'a then b'], {
      env: { REDIS_URL: redis.url },
    });
    children.push(run);
    let stderr = '';
    run.stderr?.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    // What `head -1` does: read the first line, then close its end of the pipe.
    await new Promise<void>((resolve) => run.stdout?.once('data', () => resolve()));
    run.stdout?.destroy();
    const exit = await exitWithin(run, 25_000);
    expect(exit, `still running 25 s after its reader went away:\n${stderr}`).toBeDefined();
    expect(exit?.code, stderr).toBe(130);
    expect(stderr).toMatch(
      /orq: interrupted: session \S+ is (PLANNING|RUNNING) and waits for its roles/,
    );
    expect(stderr).not.toContain('did not finish in time');
  }, 60_000);
  it('stops orq run whose reader is gone before the roles start, and its private Redis', async (context) => {
    needsRedisServer(context);
    const dir = mkdtempSync(join(temp.dir, 'gone-early-'));
    const run = spawnOrq(['run', '--latency', '500', 'a then b'], { cwd: dir });
    children.push(run);
    let stderr = '';
    run.stderr?.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    // `orq run … | true`: the pipe is closed before the first write (the private Redis notice).
    run.stdout?.destroy();
    const exit = await exitWithin(run, 30_000);
    expect(exit, `still running 30 s after its reader went away:\n${stderr}`).toBeDefined();
    expect(exit?.code, stderr).toBe(130);
    expect(existsSync(join(dir, '.orq/redis/server.json')), stderr).toBe(false);
  }, 60_000);

  it('keeps the exit code of orq run --json whose last write finds its reader gone', async (context) => {
    needsRedisServer(context);
    const dir = mkdtempSync(join(temp.dir, 'gone-late-'));
    const scenario = join(root, 'examples/scenarios/blocked-task.yaml');
    const run = spawnOrq(['run', '--json', '--scenario', scenario, 'Deploy the service'], {
      cwd: dir,
    });
    children.push(run);
    let stderr = '';
    run.stderr?.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    // With --json the final session is the only write to stdout: it fails, the session BLOCKED.
    run.stdout?.destroy();
    const exit = await exitWithin(run, 30_000);
    expect(exit?.code, stderr).toBe(1);
    expect(stderr).toContain('is BLOCKED');
    expect(existsSync(join(dir, '.orq/redis/server.json')), stderr).toBe(false);
  }, 60_000);
});

describe('orq run with its private Redis (no REDIS_URL)', () => {
  allNeedRedisServer();
  it('takes a Ctrl-C to the whole terminal job itself: shuts down with Redis there, then stops it', async () => {
    const dir = mkdtempSync(join(temp.dir, 'ctrl-c-'));
    const run = spawnOrq(['run', '--latency', '1500', 'a then b'], { cwd: dir, detached: true });
    children.push(run);
    const output = collect(run);
    await waitForOutput(run, 'submitted');
    const server = privateServer(dir);
    // What a terminal does on Ctrl-C: SIGINT to every process of the foreground job.
    process.kill(-run.pid!, 'SIGINT');
    const exit = await exitWithin(run, 20_000);
    expect(exit, `still running 20 s after Ctrl-C:\n${output.text()}`).toBeDefined();
    expect(output.text()).toContain('orq: interrupted: session');
    // Redis outlived the shutdown that needed it: no consumer lost it.
    expect(output.text()).not.toContain('redis unreachable');
    expect(output.text()).not.toContain('did not finish in time');
    expect(await redisAnswers(server.url)).toBe(false);
    expect(existsSync(join(dir, '.orq/redis/server.json'))).toBe(false);
  }, 60_000);

  it('runs two orq run started at once on one server, stopped by the last to end', async () => {
    const dir = mkdtempSync(join(temp.dir, 'two-runs-'));
    // Different lengths: whichever starts the server, the first to end must not stop it.
    const runs = [
      spawnOrq(['run', '--latency', '100', 'write the docs'], { cwd: dir }),
      spawnOrq(['run', '--latency', '1200', 'add the tests'], { cwd: dir }),
    ];
    children.push(...runs);
    const outputs = runs.map(collect);
    const exits = await Promise.all(runs.map((run) => exitWithin(run, 45_000)));
    const texts = outputs.map((o) => o.text());
    for (const [i, exit] of exits.entries()) expect(exit?.code, texts[i]).toBe(0);
    const started = texts.join('').match(/started a private redis-server at (\S+)/g) ?? [];
    expect(started, texts.join('\n---\n')).toHaveLength(1);
    const url = started[0]!.split(' at ')[1]!;
    expect(await redisAnswers(url)).toBe(false);
    expect(existsSync(join(dir, '.orq/redis/server.json'))).toBe(false);
  }, 60_000);

  it('leaves no server running after the next orq command when one was killed with its orq', async () => {
    const dir = mkdtempSync(join(temp.dir, 'orphan-'));
    const run = spawnOrq(['run', '--latency', '1500', 'a then b'], { cwd: dir, detached: true });
    children.push(run);
    await waitForOutput(run, 'submitted');
    const server = privateServer(dir);
    run.kill('SIGKILL');
    await exitWithin(run, 10_000);
    expect(await redisAnswers(server.url)).toBe(true);

    // The next command in that directory finds it, takes it over and stops it when done.
    const status = await orq(['status'], { cwd: dir });
    expect(status.code, status.stderr).toBe(0);
    expect(status.stdout).toContain('a then b');
    expect(await redisAnswers(server.url)).toBe(false);
    expect(existsSync(join(dir, '.orq/redis/server.json'))).toBe(false);
  }, 60_000);
});
