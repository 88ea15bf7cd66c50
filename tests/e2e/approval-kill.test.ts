import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomUUID } from 'node:crypto';
import { afterEach, describe, expect, it } from 'vitest';
import { createClient, type OrqClient } from '../../src/producers/client.js';
import { freePort, startPrivateRedis, type PrivateRedis } from '../../src/shared/redis-server.js';
import { bullQueue, Pods } from '../support/pods.js';
import { eventually } from '../support/scenarios.js';

// A wait for a person (issue 48) is a record on the session and, with a timeout, a delayed job:
// neither lives in a pod. kill -9 of every pod and a Redis restart with AOF lose neither.

const INSTRUCTION = '認証機能とバリデーションを実装して';
let redis: PrivateRedis | undefined;
let pods: Pods | undefined;
let client: OrqClient | undefined;
const dirs: string[] = [];
afterEach(async () => {
  await client?.close();
  await pods?.stopAll();
  await redis?.stop();
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
  client = pods = redis = undefined;
});

/** A private Redis with AOF on a port of its own, pods as processes, and a client. */
async function setUp() {
  const dir = mkdtempSync(join(tmpdir(), 'orq-approval-kill-'));
  dirs.push(dir);
  const port = await freePort();
  redis = await startPrivateRedis({ dir, port, appendonly: true });
  const prefix = `a${randomUUID().slice(0, 8)}`;
  pods = new Pods({ REDIS_URL: redis.url, ORQ_PREFIX: prefix });
  await pods.start('coordinator');
  await pods.start('planner,judge,worker,replanner');
  client = await createClient({ connection: redis.url, prefix });
  const restartRedis = async () => {
    await redis!.stop();
    redis = await startPrivateRedis({ dir, port, appendonly: true });
  };
  return { c: client, pods, prefix, restartRedis };
}

describe('a plan approval across kill -9 of every pod and a Redis restart', () => {
  it('still waits with its plan afterwards, and an answer given while no coordinator runs is applied once one does', async () => {
    const { c, pods: p, prefix, restartRedis } = await setUp();
    const { id } = await c.submit({
      instruction: INSTRUCTION,
      config: { approval: { plan: 'required' } },
    });
    const before = await c.wait(id, { timeoutMs: 30_000 });
    expect(before.session.state).toBe('AWAITING_APPROVAL');

    // Waiting holds nothing: no job of the session is active or queued in any role's queue.
    for (const name of ['plan', 'judge', 'work', 'replan'] as const) {
      const queue = bullQueue(c.store.redis, prefix, name);
      try {
        expect(await queue.getJobCounts('active', 'waiting', 'delayed', 'prioritized')).toEqual({
          active: 0,
          waiting: 0,
          delayed: 0,
          prioritized: 0,
        });
      } finally {
        await queue.close();
      }
    }

    await p.stopAll('SIGKILL');
    await restartRedis();
    // The client reconnects on its own schedule: read once it is back.
    const after = await eventually(() => c.get(id).catch(() => undefined), 'Redis back', 20_000);
    expect(after.session.state).toBe('AWAITING_APPROVAL');
    expect(after.session.wait).toEqual(before.session.wait);

    // No pod runs: the answer is queued, and applied by the next coordinator.
    const outcome = await c.approve(id, { waitMs: 0, waitId: 'plan-0' });
    expect(outcome.applied).toBe(false);
    await p.start('coordinator');
    await p.start('planner,judge,worker,replanner');
    const done = await c.wait(id, { timeoutMs: 30_000 });
    expect(done.session.state).toBe('COMPLETED');
    const answered = (await c.history(id)).filter(
      (e) => e.entry.type === 'wait' && e.entry.action === 'answered',
    );
    expect(answered).toHaveLength(1);
  });

  it('ends on its timeout although the coordinator was killed while it waited', async () => {
    const { c, pods: p } = await setUp();
    const { id } = await c.submit({
      instruction: INSTRUCTION,
      config: { approval: { plan: 'required', timeoutSeconds: 2, onTimeout: 'approve' } },
    });
    expect((await c.wait(id, { timeoutMs: 30_000 })).session.state).toBe('AWAITING_APPROVAL');
    await p.stopAll('SIGKILL');
    // Past the timeout with no pod at all; the delayed timeout event waits in Redis.
    await new Promise((r) => setTimeout(r, 3_000));
    expect((await c.get(id)).session.state).toBe('AWAITING_APPROVAL');
    await p.start('coordinator');
    await p.start('planner,judge,worker,replanner');
    const done = await c.wait(id, { until: 'finished', timeoutMs: 30_000 });
    expect(done.session.state).toBe('COMPLETED');
    const history = (await c.history(id)).map((e) => e.entry);
    expect(history.some((e) => e.type === 'wait' && e.action === 'timed-out')).toBe(true);
  });
});
