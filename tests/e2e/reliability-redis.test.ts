import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { randomUUID } from 'node:crypto';
import { PassThrough } from 'node:stream';
import { afterEach, describe, expect, it } from 'vitest';
import { createClient, type OrqClient } from '../../src/producers/client.js';
import type { RunningHttpServer } from '../../src/producers/http/server.js';
import { OrqError } from '../../src/shared/errors.js';
import { freePort } from '../../src/shared/redis-server.js';
import { startTestRedis, type TestRedis } from '../support/test-redis.js';
import { root, stopProcess, waitForOutput } from '../support/cli.js';
import { followSession } from '../../src/producers/cli/follow.js';
import { bullQueue, Pods } from '../support/pods.js';
import { eventually, executionsOf } from '../support/scenarios.js';
import { serveApi } from '../support/http.js';

const diamond = resolve(root, 'examples/scenarios/diamond.yaml');

let redis: TestRedis | undefined;
let pods: Pods | undefined;
let client: OrqClient | undefined;
let server: RunningHttpServer | undefined;
const dirs: string[] = [];
afterEach(async () => {
  await server?.close();
  await client?.close();
  await pods?.stopAll();
  await redis?.stop();
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
  server = client = pods = redis = undefined;
});

/** How a promise settles, and how long it took. */
async function settle<T>(promise: Promise<T>): Promise<{ error?: unknown; ms: number }> {
  const started = Date.now();
  try {
    await promise;
    return { ms: Date.now() - started };
  } catch (error) {
    return { error, ms: Date.now() - started };
  }
}

describe('Redis gone while a pod is idle', () => {
  it('the pod still stops on one SIGTERM with exit code 0, long before its shutdown timeout', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'orq-gone-'));
    dirs.push(dir);
    redis = await startTestRedis({ dir, port: await freePort() });
    pods = new Pods({ REDIS_URL: redis.url, ORQ_PREFIX: `g${randomUUID().slice(0, 8)}` });
    const pod = await pods.start('planner,judge,worker,replanner,coordinator');
    let output = '';
    pod.stdout?.on('data', (chunk: Buffer) => (output += chunk.toString()));
    // Watched from before the stop: a container's stop returns after the pod has seen it.
    const unreachable = waitForOutput(pod, 'redis unreachable');
    await redis.stop();
    await unreachable;
    // The default --shutdown-timeout is 30 s; stopProcess sends SIGKILL after 15 s, so a pod
    // that sat out the timeout would exit with null.
    expect(await stopProcess(pod)).toBe(0);
    // Whether BullMQ's close hangs on the lost connection (the pod then says 'stopping anyway'
    // after about 3 s) or returns at once depends on where each consumer's loop was when Redis
    // went; either way the pod must finish its shutdown.
    expect(output).toMatch(/"msg":"stopped"/);
  });
});

describe('following a session while Redis goes away', () => {
  it('says that Redis was lost, and when it is back, and goes on following', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'orq-follow-'));
    dirs.push(dir);
    const port = await freePort();
    redis = await startTestRedis({ dir, port, appendonly: true });
    client = await createClient({ connection: redis.url });
    // No roles: the session waits in PLANNING, and the watch with it.
    const { id } = await client.submit({ instruction: 'wait here' });
    const [out, notices] = [new PassThrough(), new PassThrough()];
    const text = (stream: PassThrough) => {
      let all = '';
      stream.on('data', (chunk: Buffer) => (all += chunk.toString()));
      return () => all;
    };
    // A terminal too: there the notice is the live frame's last line.
    const screen = Object.assign(new PassThrough(), { isTTY: true, rows: 30, columns: 120 });
    const [printed, told, drawn] = [text(out), text(notices), text(screen)];
    const stop = new AbortController();
    const following = followSession(client, id, {
      mode: 'lines',
      out,
      notices,
      signal: stop.signal,
    });
    const live = followSession(client, id, { mode: 'live', out: screen, signal: stop.signal });
    await eventually(() => (printed().includes('PLANNING') ? true : undefined), 'the history');

    await redis.stop();
    await eventually(
      () => (told().includes('orq: lost Redis (') ? true : undefined),
      'the notice that Redis is lost',
    );
    expect(told()).toContain('waiting for it to come back (Ctrl-C to stop)');
    await eventually(
      () => (drawn().includes('lost Redis (') ? true : undefined),
      'the live frame to say that Redis is lost',
    );
    await redis.start();
    await eventually(
      () => (told().includes('orq: Redis is back') ? true : undefined),
      'the notice that Redis is back',
      20_000,
    );
    // The live view follows on a watch of its own, which may see Redis back a moment after the
    // line follower did: its last frame, drawn after that, has no notice any more.
    const lastFrame = () => drawn().slice(drawn().lastIndexOf(`session ${id}`));
    await eventually(
      () => (lastFrame().includes('lost Redis') ? undefined : true),
      'the live frame without the notice',
      20_000,
    );
    stop.abort();
    expect((await following).session.state).toBe('PLANNING');
    await live;
    expect(lastFrame()).not.toContain('lost Redis');
    expect(told().split('\n').filter(Boolean)).toHaveLength(2);
  });
});

describe('Redis restarted mid-session with AOF on', () => {
  it('every consumer reconnects and the session completes; while down, producers fail fast', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'orq-aof-'));
    dirs.push(dir);
    // A port of our own, so the restarted server comes back where every process expects it.
    const port = await freePort();
    redis = await startTestRedis({ dir, port, appendonly: true });
    const prefix = `r${randomUUID().slice(0, 8)}`;
    pods = new Pods({ REDIS_URL: redis.url, ORQ_PREFIX: prefix });
    await pods.start('planner,judge,replanner,coordinator');
    // Slow executions keep the session mid-flight while Redis is down.
    await pods.start('worker', ['--latency', '1500']);
    client = await createClient({ connection: redis.url, prefix });
    server = await serveApi(client);

    // One slot: B or C waits in the session's ready set (a Redis key) across the restart.
    const first = await client.submit({
      instruction: 'diamond',
      config: { llm: { scenario: diamond }, scheduling: { maxTasksInFlight: 1 } },
    });
    const work = bullQueue(client.store.redis, prefix, 'work');
    await eventually(
      async () => ((await work.getActiveCount()) > 0 ? true : undefined),
      'a task to be executing',
      20_000,
    );
    await work.close();

    await redis.stop();
    // With Redis down: a prompt, typed error from the client, 503 from the HTTP API.
    const submit = await settle(client.submit({ instruction: 'while down' }));
    expect(submit.error).toBeInstanceOf(OrqError);
    expect((submit.error as OrqError).code).toBe('REDIS_UNAVAILABLE');
    // Where Redis was looked for, in words: ioredis's text about its options stays in the cause.
    expect((submit.error as OrqError).message).toMatch(/^Redis at 127\.0\.0\.1:\d+ is unreachable/);
    expect((submit.error as OrqError).message).not.toMatch(/enableOfflineQueue|Stream isn't/);
    expect(submit.ms).toBeLessThan(5_000);
    const ready = await fetch(`${server.url}/readyz`);
    expect(ready.status).toBe(503);
    const created = await fetch(`${server.url}/sessions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ instruction: 'while down' }),
    });
    expect(created.status).toBe(503);
    expect(await created.json()).toMatchObject({ error: 'REDIS_UNAVAILABLE' });
    // Stay down past the consumers' first reconnect attempts (they back off and retry).
    await new Promise((r) => setTimeout(r, 2_000));

    await redis.start();
    await eventually(
      async () => ((await fetch(`${server!.url}/readyz`)).status === 200 ? true : undefined),
      'the API to be ready again',
      20_000,
    );
    // The session acknowledged before the restart survived it (AOF) and completes.
    const view = await client.wait(first.id, { timeoutMs: 60_000 });
    expect(view.session.state).toBe('COMPLETED');
    const h = (await client.history(first.id)).map((e) => e.entry);
    for (const task of view.tasks) expect(executionsOf(h, task.id)).toHaveLength(1);
    // The one slot held: no task was dispatched before the one before it was judged.
    const moves = h.flatMap((e) =>
      e.type === 'state_change' && e.entity === 'task' && (e.to === 'RUNNING' || e.to === 'DONE')
        ? [e.to]
        : [],
    );
    expect(moves).toEqual([
      'RUNNING',
      'DONE',
      'RUNNING',
      'DONE',
      'RUNNING',
      'DONE',
      'RUNNING',
      'DONE',
    ]);

    // Consumers that were idle in a blocking read during the restart take new work too: a
    // session submitted now passes through the planner, judge, worker and coordinator.
    const second = await client.submit({
      instruction: 'after the restart',
      config: { llm: { scenario: diamond } },
    });
    expect((await client.wait(second.id, { timeoutMs: 60_000 })).session.state).toBe('COMPLETED');
    const viaHttp = await fetch(`${server.url}/sessions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ instruction: 'over http after the restart' }),
    });
    expect(viaHttp.status).toBe(201);
    const { id } = (await viaHttp.json()) as { id: string };
    expect((await client.wait(id, { timeoutMs: 60_000 })).session.state).toBe('COMPLETED');
  }, 150_000);

  it('createClient fails fast with REDIS_UNAVAILABLE when no Redis answers', async () => {
    const port = await freePort();
    const attempt = await settle(createClient({ connection: `redis://127.0.0.1:${port}` }));
    expect(attempt.error).toBeInstanceOf(OrqError);
    expect((attempt.error as OrqError).code).toBe('REDIS_UNAVAILABLE');
    // Refused at once, not left to the connect timeout.
    expect((attempt.error as OrqError).message).toMatch(/ECONNREFUSED/);
    expect(attempt.ms).toBeLessThan(10_000);
  });
});
