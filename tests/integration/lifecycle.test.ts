import { afterEach, describe, expect, it } from 'vitest';
import { startCluster, type TestCluster } from '../support/cluster.js';

let cluster: TestCluster | undefined;
afterEach(async () => {
  await cluster?.close();
  cluster = undefined;
});

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
