import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/shared/config/load.js';
import { createClient, type OrqClient } from '../../src/producers/client.js';
import { silentLogger } from '../../src/shared/logger.js';
import { ALL_QUEUES, bullPrefix } from '../../src/shared/queues.js';
import { startTestRedis, type TestRedis } from '../support/test-redis.js';
import { startRoles, type RunningRoles } from '../../src/workers/registry.js';
import { Pods, queueEnv } from '../support/pods.js';
import { executionsOf, scenarioDir } from '../support/scenarios.js';

/** The size the issue asks for: 200 concurrent sessions × 25 independent tasks = 5,000 tasks. */
const SESSIONS = 200;
const TASKS_PER_SESSION = 25;
const WORKER_PROCESSES = 4;
/** Completed jobs BullMQ keeps per queue: small, so retention visibly bounds the queues. */
const KEEP_COMPLETED = 50;
const RETENTION = {
  removeOnCompleteCount: KEEP_COMPLETED,
  removeOnCompleteAgeSeconds: 3600,
  removeOnFailAgeSeconds: 3600,
};

let redis: TestRedis | undefined;
let pods: Pods | undefined;
let pod: RunningRoles | undefined;
let client: OrqClient | undefined;
const scenarios = scenarioDir();
const dir = mkdtempSync(join(tmpdir(), 'orq-load-'));
afterEach(async () => {
  await client?.close();
  await pod?.close(5_000);
  await pods?.stopAll();
  await redis?.stop();
  client = pod = pods = redis = undefined;
});
afterAll(() => {
  scenarios.cleanup();
  rmSync(dir, { recursive: true, force: true });
});

const taskIds = Array.from(
  { length: TASKS_PER_SESSION },
  (_, i) => `t${String(i + 1).padStart(2, '0')}`,
);
const wide = scenarios.write('wide', {
  plans: [
    { tasks: taskIds.map((id) => ({ id, title: `Task ${id}`, acceptance: 'done', context: 'c' })) },
  ],
  planJudgements: [{ score: 90, isAcceptable: true }],
});

async function usedMemory(r: Redis): Promise<number> {
  const info = await r.info('memory');
  return Number(/^used_memory:(\d+)/m.exec(info)?.[1]);
}

/** Keys of BullMQ jobs per queue (orq job ids start with the job kind, never a bare number). */
async function jobKeysPerQueue(r: Redis, prefix: string): Promise<Record<string, number>> {
  const counts: Record<string, number> = {};
  for (const queue of ALL_QUEUES) {
    let n = 0;
    let cursor = '0';
    do {
      const [next, keys] = await r.scan(
        cursor,
        'MATCH',
        `${bullPrefix(prefix)}:${queue}:*|*`,
        'COUNT',
        1000,
      );
      cursor = next;
      n += keys.filter((k) => !k.endsWith(':logs') && !k.endsWith(':lock')).length;
    } while (cursor !== '0');
    counts[queue] = n;
  }
  return counts;
}

/** Bytes of every key matching `pattern` (MEMORY USAGE, exact: all elements sampled). */
async function bytesOf(r: Redis, pattern: string): Promise<number> {
  let total = 0;
  let cursor = '0';
  do {
    const [next, keys] = await r.scan(cursor, 'MATCH', pattern, 'COUNT', 1000);
    cursor = next;
    const pipeline = r.pipeline();
    for (const key of keys) pipeline.memory('USAGE', key, 'SAMPLES', 0);
    for (const [, bytes] of (await pipeline.exec()) ?? []) total += Number(bytes ?? 0);
  } while (cursor !== '0');
  return total;
}

describe('load', () => {
  it(`runs ${SESSIONS} concurrent sessions of ${TASKS_PER_SESSION} tasks over ${WORKER_PROCESSES} worker processes, twice; nothing lost or run twice, queues bounded by retention`, async () => {
    redis = await startTestRedis({ dir, appendonly: false });
    const prefix = `l${randomUUID().slice(0, 8)}`;
    const config = parseConfig({
      redis: { prefix },
      queues: RETENTION,
      concurrency: { planner: 8, judge: 32, coordinator: 32 },
    });
    pods = new Pods({ REDIS_URL: redis.url, ORQ_PREFIX: prefix, ...queueEnv(RETENTION) });
    await Promise.all(
      Array.from({ length: WORKER_PROCESSES }, () =>
        pods!.start('worker', ['--concurrency', '16']),
      ),
    );
    // Planner, judge and coordinator in this process.
    pod = await startRoles({
      roles: ['planner', 'judge', 'replanner', 'coordinator'],
      connection: redis.url,
      config,
      logger: silentLogger,
    });
    client = await createClient({ connection: redis.url, config });
    const shared = client.store.redis;
    if (!(shared instanceof Redis)) throw new Error('this test reads one Redis server');
    const r: Redis = shared;
    const baseline = await usedMemory(r);

    /** One wave of SESSIONS sessions submitted at once, checked task by task. */
    async function wave(n: number) {
      let peak = 0;
      let sampling = true;
      const sampler = (async () => {
        while (sampling) {
          peak = Math.max(peak, await usedMemory(r));
          await new Promise((res) => setTimeout(res, 100));
        }
      })();
      const started = Date.now();
      const sessions = await Promise.all(
        Array.from({ length: SESSIONS }, (_, i) =>
          client!.submit({ instruction: `load ${n}.${i}`, config: { llm: { scenario: wide } } }),
        ),
      );
      const views = await Promise.all(
        sessions.map((s) => client!.wait(s.id, { timeoutMs: 240_000 })),
      );
      sampling = false;
      await sampler;
      const elapsedMs = Date.now() - started;

      // All complete; every task ran exactly once, none is missing.
      expect(views.map((v) => v.session.state)).toEqual(sessions.map(() => 'COMPLETED'));
      for (const view of views) {
        expect(view.tasks.map((t) => [t.id, t.state, t.attempts])).toEqual(
          taskIds.map((id) => [id, 'DONE', 1]),
        );
        const h = (await client!.history(view.session.id)).map((e) => e.entry);
        expect(taskIds.map((id) => executionsOf(h, id).length)).toEqual(taskIds.map(() => 1));
      }
      // Nothing left behind in any queue (fair release adds jobs with a priority), nothing failed.
      for (const queue of pod!.queues.all()) {
        const counts = await queue.getJobCounts(
          'failed',
          'waiting',
          'prioritized',
          'active',
          'delayed',
        );
        expect(counts).toMatchObject({
          failed: 0,
          waiting: 0,
          prioritized: 0,
          active: 0,
          delayed: 0,
        });
      }
      return {
        elapsedMs,
        peak,
        after: await usedMemory(r),
        jobKeys: await jobKeysPerQueue(r, prefix),
        /** What BullMQ keeps: jobs, their lists and event streams. */
        queueBytes: await bytesOf(r, `${bullPrefix(prefix)}:*`),
        /** What orq keeps on purpose: each session's record, tasks and history. */
        sessionBytes: await bytesOf(r, `${prefix}:*`),
      };
    }

    const first = await wave(1);
    const second = await wave(2);
    console.log(JSON.stringify({ baseline, first, second }));

    // Retention: BullMQ keeps at most the configured count of jobs per queue, however many it
    // moved (each of work, judge and coordinator moved 10,000 jobs by now).
    for (const { jobKeys } of [first, second]) {
      for (const queue of ALL_QUEUES) expect(jobKeys[queue]).toBeLessThanOrEqual(KEEP_COMPLETED);
      expect(jobKeys.work).toBe(KEEP_COMPLETED);
    }
    // Memory returns to a bounded size: the queues' share did not grow with a second wave of
    // 5,000 tasks (BullMQ's event streams are capped too), while session data, kept on purpose
    // for inspection, grew with the number of sessions. (used_memory before, at its sampled
    // peak and after each wave is printed above for the record, not asserted: how high the
    // peak gets depends on how far the workers fall behind.)
    expect(second.queueBytes).toBeLessThan(first.queueBytes * 1.25);
    expect(second.sessionBytes).toBeGreaterThan(first.sessionBytes * 1.8);
  }, 300_000);
});
