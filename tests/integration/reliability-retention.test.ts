import { afterAll, describe, expect, it } from 'vitest';
import { clusterPerTest, type TestCluster } from '../support/cluster.js';
import { eventually, scenarioDir } from '../support/scenarios.js';

let cluster: TestCluster | undefined;
const startCluster = clusterPerTest();
const scenarios = scenarioDir();
afterAll(() => scenarios.cleanup());

const TASKS = 60;
const many = scenarios.write('many', {
  plans: [
    {
      tasks: Array.from({ length: TASKS }, (_, i) => ({
        id: `t${i}`,
        title: `Task ${i}`,
        acceptance: 'done',
        context: 'c',
      })),
    },
  ],
  planJudgements: [{ score: 90, isAcceptable: true }],
});

describe('retention', () => {
  it('trims a session history to about queues.historyMaxLength entries, keeping the latest', async () => {
    const historyMaxLength = 100;
    cluster = await startCluster({ config: { queues: { historyMaxLength } } });
    const { client } = cluster;
    const { id } = await client.submit({
      instruction: 'many',
      config: { llm: { scenario: many } },
    });
    const view = await client.wait(id, { timeoutMs: 30_000 });
    expect(view.session.state).toBe('COMPLETED');
    // Each task alone wrote six entries (ready, running, execution, judgement, decision, done).
    const length = await client.store.redis.xlen(client.store.keys(id).history);
    expect(length).toBeLessThan(TASKS * 6);
    // Trimming is approximate (`MAXLEN ~`): whole stream nodes of 100 entries go at once.
    expect(length).toBeLessThanOrEqual(historyMaxLength + 100);
    const history = await client.history(id);
    expect(history.at(-1)?.entry).toMatchObject({ type: 'state_change', to: 'COMPLETED' });
  });

  it('removes failed jobs older than queues.removeOnFailAgeSeconds when later ones fail', async () => {
    cluster = await startCluster({
      config: { queues: { removeOnFailAgeSeconds: 1, attempts: 1 } },
    });
    const plan = cluster.pods[0]!.queues.get('plan');
    const bad = async () => (await plan.add('plan', { not: 'a plan job' })).id!;
    const failed = async (ids: string[]) =>
      eventually(async () => {
        const states = await Promise.all(
          ids.map(async (id) => (await plan.getJob(id))?.getState()),
        );
        return states.every((s) => s === 'failed') ? true : undefined;
      }, 'the jobs to fail');
    const old = [await bad(), await bad(), await bad()];
    await failed(old);
    // Older than the age by the time the next job fails.
    await new Promise((r) => setTimeout(r, 1_500));
    const next = await bad();
    await failed([next]);
    await eventually(
      async () =>
        (await Promise.all(old.map((id) => plan.getJob(id)))).every((j) => !j) ? true : undefined,
      'the old failed jobs to be removed',
    );
    expect(await plan.getFailedCount()).toBe(1);
  });
});
