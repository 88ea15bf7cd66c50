import { describe, expect, it } from 'vitest';
import { clusterPerTest, type TestCluster } from '../support/cluster.js';

let cluster: TestCluster | undefined;
const startCluster = clusterPerTest();

describe('the worker chooses the executor', () => {
  it('blocks a task whose executor is unknown, with the reason in the history, without retrying', async () => {
    cluster = await startCluster({ config: { execution: { defaultExecutor: 'shell' } } });
    const session = await cluster.client.submit({ instruction: 'Write the summary' });
    const view = await cluster.client.wait(session.id, { timeoutMs: 20_000, until: 'settled' });
    expect(view.session.state).toBe('BLOCKED');
    const history = (await cluster.client.history(session.id)).map((h) => h.entry);
    const errors = history.filter((e) => e.type === 'error' && e.role === 'worker');
    expect(errors).toHaveLength(1);
    expect(errors[0]).toMatchObject({
      code: 'VALIDATION_FAILED',
      message: expect.stringContaining('execution.defaultExecutor: unknown executor "shell"'),
    });
  });
});
