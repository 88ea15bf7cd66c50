import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomUUID } from 'node:crypto';
import { afterEach, describe, expect, it } from 'vitest';
import { createClient, type OrqClient } from '../../src/producers/client.js';
import type { Session } from '../../src/shared/domain/session.js';
import { freePort, startPrivateRedis, type PrivateRedis } from '../../src/shared/redis-server.js';
import { bullQueue, Pods } from '../support/pods.js';
import { eventually } from '../support/scenarios.js';

// A step waiting for a person (approval.steps, issue 48) is a record on the session and a step
// in the execution's journal; its work job has ended. kill -9 of every pod (coordinator and
// workers) and a Redis restart with AOF lose neither, and the approval resumes the execution.

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

/** Every executing task of the session waits at a step (none is running a job). */
async function allWaiting(c: OrqClient, id: string): Promise<Session | undefined> {
  const { session, tasks } = await c.get(id);
  const running = tasks.filter((t) => t.state === 'RUNNING').map((t) => t.id);
  const waiting = (session.stepWaits ?? []).map((w) => w.taskId);
  return running.length > 0 && running.every((t) => waiting.includes(t)) ? session : undefined;
}

describe('a step approval across kill -9 of every pod and a Redis restart', () => {
  it('still waits with its step afterwards, holding no job, and answers given while no pod runs resume the executions', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'orq-step-kill-'));
    dirs.push(dir);
    const port = await freePort();
    redis = await startPrivateRedis({ dir, port, appendonly: true });
    const prefix = `k${randomUUID().slice(0, 8)}`;
    pods = new Pods({ REDIS_URL: redis.url, ORQ_PREFIX: prefix });
    await pods.start('coordinator');
    await pods.start('planner,judge,worker,replanner');
    client = await createClient({ connection: redis.url, prefix });
    const c = client;

    const { id } = await c.submit({
      instruction: 'Write the release notes',
      config: {
        execution: { defaultExecutor: 'agent', workspaceRoot: join(dir, 'ws') },
        approval: { steps: [{ tool: 'write_file' }] },
      },
    });
    const before = await eventually(() => allWaiting(c, id), 'every running task waiting', 30_000);
    const waits = before.stepWaits ?? [];
    expect(waits.length).toBeGreaterThan(0);

    // Waiting holds nothing: no job of the session is active or queued in the work queue.
    const work = bullQueue(c.store.redis, prefix, 'work');
    try {
      expect(await work.getJobCounts('active', 'waiting', 'delayed', 'prioritized')).toEqual({
        active: 0,
        waiting: 0,
        delayed: 0,
        prioritized: 0,
      });
    } finally {
      await work.close();
    }

    await pods.stopAll('SIGKILL');
    await redis.stop();
    redis = await startPrivateRedis({ dir, port, appendonly: true });
    const after = await eventually(() => c.get(id).catch(() => undefined), 'Redis back', 20_000);
    expect(after.session.state).toBe('RUNNING');
    expect(after.session.stepWaits).toEqual(waits);

    // No pod runs: the answers are queued, and applied by the next coordinator.
    for (const wait of waits) {
      const outcome = await c.approve(id, { waitId: wait.id, waitMs: 0 });
      expect(outcome.applied).toBe(false);
    }
    await pods.start('coordinator');
    await pods.start('planner,judge,worker,replanner');
    // Tasks that start later wait at their own write: approve those as they come.
    const answered = new Set(waits.map((w) => w.id));
    const done = await eventually(
      async () => {
        const { session } = await c.get(id);
        if (session.state === 'COMPLETED') return session;
        for (const wait of session.stepWaits ?? []) {
          if (answered.has(wait.id)) continue;
          answered.add(wait.id);
          await c.approve(id, { waitId: wait.id, waitMs: 0 });
        }
        return undefined;
      },
      'the session completed',
      60_000,
    );
    expect(done.state).toBe('COMPLETED');
    const history = (await c.history(id)).map((e) => e.entry);
    const closed = history.filter((e) => e.type === 'wait' && e.action === 'answered');
    expect(closed).toHaveLength(answered.size);
    // The approved executions went on: each task ran once (attempt 1), none failed.
    const { tasks } = await c.get(id);
    expect(tasks.every((t) => t.state === 'DONE' && t.attempts === 1)).toBe(true);
  });
});
