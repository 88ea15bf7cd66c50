import { afterAll, afterEach, describe, expect, inject, it } from 'vitest';
import { providerLimit } from '../../src/shared/llm/quota.js';
import { startCluster, type TestCluster } from '../support/cluster.js';
import { startFakeLlmServer, type FakeLlmServer } from '../support/fake-llm-server.js';
import { exited, FAST_LOCKS, Pods, queueEnv } from '../support/pods.js';
import { eventually, scenarioDir } from '../support/scenarios.js';

const KEY = 'sk-quota-kill';

let cluster: TestCluster | undefined;
let pods: Pods | undefined;
let server: FakeLlmServer | undefined;
const scenarios = scenarioDir();
afterEach(async () => {
  await pods?.stopAll();
  pods = undefined;
  await cluster?.close();
  cluster = undefined;
  await server?.close();
  server = undefined;
});
afterAll(() => scenarios.cleanup());

describe('kill -9 of a worker pod while its model call holds a slot of the provider quota', () => {
  it('the slot is held until its lease lapses, then the redelivered task gets it', async () => {
    // The first call never gets an answer: the pod holds the only slot when it is killed.
    let calls = 0;
    server = await startFakeLlmServer('openai', () =>
      (calls += 1) === 1 ? { hang: true } : { json: { output: 'written', log: '' } },
    );
    cluster = await startCluster({ roles: ['planner', 'judge', 'replanner', 'coordinator'] });
    const { client } = cluster;
    const env = { REDIS_URL: inject('redisUrl'), ORQ_PREFIX: cluster.prefix, QUOTA_KEY: KEY };
    pods = new Pods({ ...env, ...queueEnv(FAST_LOCKS) });
    const doomed = await pods.start('worker', ['--concurrency', '1']);
    const scenario = scenarios.write('one-task', {
      plans: [{ tasks: [{ id: 'A', title: 'A', acceptance: 'a', context: 'c' }] }],
      planJudgements: [{ score: 95, isAcceptable: true }],
    });
    const { id } = await client.submit({
      instruction: 'one task under a quota',
      config: {
        llm: {
          scenario,
          worker: {
            provider: 'openai',
            model: 'test',
            baseUrl: server.baseUrl,
            apiKeyEnv: 'QUOTA_KEY',
            // The slot's lease: this limit + 5 s.
            timeoutSeconds: 3,
            rateLimit: { maxConcurrent: 1 },
          },
        },
      },
    });
    const limit = providerLimit('openai', server.baseUrl, KEY).name;
    const quota = async () => (await client.quotas()).find((q) => q.name === limit);
    await eventually(
      async () => ((await quota())?.inFlight === 1 && calls === 1 ? true : undefined),
      'the call to hold the slot',
      30_000,
    );
    doomed.kill('SIGKILL');
    expect(await exited(doomed)).toBe('SIGKILL');

    await pods.start('worker', ['--concurrency', '1']);
    const view = await client.wait(id, { timeoutMs: 40_000 });
    expect(view.session.state).toBe('COMPLETED');
    const after = await quota();
    // The new pod found the slot taken by the dead one (no one settled its call) and waited
    // for its lease to lapse; then its call got the slot and gave it back.
    expect(after?.refused).toBeGreaterThanOrEqual(1);
    expect(after).toMatchObject({ granted: 2, inFlight: 0 });
    expect(calls).toBe(2);
  }, 90_000);
});
