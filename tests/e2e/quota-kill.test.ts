import { afterAll, afterEach, describe, expect, inject, it } from 'vitest';
import { providerLimit, SLOT_LEASE_MARGIN_MS } from '../../src/workers/llm/quota.js';
import { startCluster, type TestCluster } from '../support/cluster.js';
import { startFakeLlmServer, type FakeLlmServer } from '../support/fake-llm-server.js';
import { exited, FAST_LOCKS, Pods, queueEnv } from '../support/pods.js';
import { eventually, scenarioDir } from '../support/scenarios.js';

const KEY = 'sk-quota-kill';
/** How long a slot of a call is held if its pod dies mid-call. */
const LEASE_MS = 8_000;

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
    const arrivals: number[] = [];
    server = await startFakeLlmServer('openai', () =>
      arrivals.push(Date.now()) === 1 ? { hang: true } : { json: { output: 'written', log: '' } },
    );
    const calls = () => arrivals.length;
    cluster = await startCluster({ roles: ['planner', 'judge', 'replanner', 'coordinator'] });
    const { client } = cluster;
    const env = { REDIS_URL: inject('redisUrl'), ORQ_PREFIX: cluster.prefix, QUOTA_KEY: KEY };
    pods = new Pods(env);
    // Short locks for the pod that dies, so its job is redelivered soon after the kill.
    const doomed = await pods.start('worker', ['--concurrency', '1'], queueEnv(FAST_LOCKS));
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
            timeoutSeconds: LEASE_MS / 1000 - SLOT_LEASE_MARGIN_MS / 1000,
            rateLimit: { maxConcurrent: 1 },
          },
        },
      },
    });
    const limit = providerLimit('openai', server.baseUrl, KEY).name;
    const quota = async () => (await client.quotas()).find((q) => q.name === limit);
    await eventually(
      async () => ((await quota())?.inFlight === 1 && calls() === 1 ? true : undefined),
      'the call to hold the slot',
      30_000,
    );
    doomed.kill('SIGKILL');
    expect(await exited(doomed)).toBe('SIGKILL');

    // The pod that takes over checks for stalled jobs as often, but keeps the default lock: a
    // busy machine that delays one of its renewals must not redeliver its job a second time.
    await pods.start('worker', ['--concurrency', '1'], queueEnv({ stalledIntervalMs: 1_000 }));
    const view = await client.wait(id, { timeoutMs: 40_000 });
    expect(view.session.state).toBe('COMPLETED');
    const after = await quota();
    // The new pod found the slot taken by the dead one (no one settled its call) and waited
    // for its lease to lapse; then its call got the slot and gave it back.
    expect(after?.refused).toBeGreaterThanOrEqual(1);
    expect(after?.inFlight).toBe(0);
    expect(after?.granted).toBeGreaterThanOrEqual(2);
    // Not before the lease lapsed: it began when the dead pod's call took the slot, just before
    // that call reached the server (a second's slack for that gap). Without the held slot the
    // call would come as soon as the job is redelivered, 2 to 4 s after the first.
    expect(arrivals.at(-1)! - arrivals[0]!).toBeGreaterThanOrEqual(LEASE_MS - 1_000);
  }, 90_000);
});
