import { afterEach, describe, expect, it } from 'vitest';
import {
  expectNoRoleJobs,
  readWhenBack,
  startKillCluster,
  type KillCluster,
} from '../support/kill-cluster.js';

// A wait for a person (issue 48) is a record on the session and, with a timeout, a delayed job:
// neither lives in a pod. kill -9 of every pod and a Redis restart with AOF lose neither.

const INSTRUCTION = '認証機能とバリデーションを実装して';
let cluster: KillCluster | undefined;
afterEach(async () => {
  await cluster?.close();
  cluster = undefined;
});

describe('a plan approval across kill -9 of every pod and a Redis restart', () => {
  it('still waits with its plan afterwards, and an answer given while no coordinator runs is applied once one does', async () => {
    cluster = await startKillCluster('approval-kill');
    const { client: c, pods: p } = cluster;
    const { id } = await c.submit({
      instruction: INSTRUCTION,
      config: { approval: { plan: 'required' } },
    });
    const before = await c.wait(id, { timeoutMs: 30_000 });
    expect(before.session.state).toBe('AWAITING_APPROVAL');

    // Waiting holds nothing: no job of the session is active or queued in any role's queue.
    await expectNoRoleJobs(cluster);

    await p.stopAll('SIGKILL');
    await cluster.restartRedis();
    const after = await readWhenBack(c, id);
    expect(after.session.state).toBe('AWAITING_APPROVAL');
    expect(after.session.wait).toEqual(before.session.wait);

    // No pod runs: the answer is queued, and applied by the next coordinator.
    const outcome = await c.approve(id, { waitMs: 0, waitId: 'plan-0' });
    expect(outcome.applied).toBe(false);
    await cluster.startPods();
    const done = await c.wait(id, { timeoutMs: 30_000 });
    expect(done.session.state).toBe('COMPLETED');
    const answered = (await c.history(id)).filter(
      (e) => e.entry.type === 'wait' && e.entry.action === 'answered',
    );
    expect(answered).toHaveLength(1);
  });

  it('ends on its timeout although the coordinator was killed while it waited', async () => {
    cluster = await startKillCluster('approval-kill');
    const { client: c, pods: p } = cluster;
    const { id } = await c.submit({
      instruction: INSTRUCTION,
      config: { approval: { plan: 'required', timeoutSeconds: 2, onTimeout: 'approve' } },
    });
    expect((await c.wait(id, { timeoutMs: 30_000 })).session.state).toBe('AWAITING_APPROVAL');
    await p.stopAll('SIGKILL');
    // Past the timeout with no pod at all; the delayed timeout event waits in Redis.
    await new Promise((r) => setTimeout(r, 3_000));
    expect((await c.get(id)).session.state).toBe('AWAITING_APPROVAL');
    await cluster.startPods();
    const done = await c.wait(id, { until: 'finished', timeoutMs: 30_000 });
    expect(done.session.state).toBe('COMPLETED');
    const history = (await c.history(id)).map((e) => e.entry);
    expect(history.some((e) => e.type === 'wait' && e.action === 'timed-out')).toBe(true);
  });
});
