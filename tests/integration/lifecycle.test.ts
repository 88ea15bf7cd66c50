import { describe, expect, it } from 'vitest';
import { clusterPerTest, type TestCluster } from '../support/cluster.js';

let cluster: TestCluster | undefined;
const startCluster = clusterPerTest();

describe('a session end to end with the builtin provider', () => {
  it('plans, runs every task and completes', async () => {
    cluster = await startCluster();
    const session = await cluster.client.submit({
      instruction: '認証機能とバリデーションを実装して',
    });
    const view = await cluster.client.wait(session.id, { timeoutMs: 20_000 });
    expect(view.session.state).toBe('COMPLETED');
    expect(view.tasks.length).toBeGreaterThanOrEqual(2);
    expect(view.tasks.every((t) => t.state === 'DONE')).toBe(true);
    expect(view.counters).toEqual({ open: 0, active: 0 });
  });
});

describe('resume then wait', () => {
  it('sees the resumed session, not the BLOCKED state from before the resume', async () => {
    cluster = await startCluster({ roles: ['planner', 'judge', 'worker', 'replanner'] });
    const coordinator = await cluster.startPod(['coordinator']);
    const scenario = new URL('../../examples/scenarios/blocked-task.yaml', import.meta.url)
      .pathname;
    const session = await cluster.client.submit({
      instruction: 'blocked then fixed',
      config: { llm: { scenario } },
    });
    const blocked = await cluster.client.wait(session.id, { timeoutMs: 20_000 });
    expect(blocked.session.state).toBe('BLOCKED');

    // The coordinator is away when the resume is requested and back a moment later: a resume
    // that returned before the coordinator applied it would leave `wait` looking at BLOCKED.
    await coordinator.close(5_000);
    const c = cluster;
    const back = new Promise((r) => setTimeout(r, 1_000)).then(() => c.startPod(['coordinator']));
    await cluster.client.resume(session.id, { mode: 'retry' });
    const view = await cluster.client.wait(session.id, { timeoutMs: 20_000 });
    await back;
    expect(view.session.state).toBe('COMPLETED');
  });
});
