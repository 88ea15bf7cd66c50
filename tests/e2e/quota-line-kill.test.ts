import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, afterEach, describe, expect, inject, it } from 'vitest';
import { providerLimit } from '../../src/workers/llm/quota.js';
import { QuotaStore } from '../../src/shared/store/quota-store.js';
import { startCluster, type TestCluster } from '../support/cluster.js';
import { startFakeLlmServer, type FakeLlmServer } from '../support/fake-llm-server.js';
import { bullQueue, exited, FAST_LOCKS, Pods, queueEnv } from '../support/pods.js';
import { eventually, scenarioDir } from '../support/scenarios.js';

/**
 * Issue 46, nothing lost, nothing stuck: a worker pod (a process) killed with kill -9 while its
 * task's model call waits in the provider limit's line. The call keeps its place under a lease,
 * so the task, redelivered to another pod once the dead pod's lock expires, finds it again; the
 * call is granted, the session completes and the line ends empty.
 */
const KEY = 'sk-quota-line-kill';

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

describe('kill -9 of a worker pod while its call waits in the quota line', () => {
  it('the redelivered task finds its place, is granted, and the line ends empty', async () => {
    server = await startFakeLlmServer('openai', () => ({ json: { output: 'written', log: '' } }));
    cluster = await startCluster({ roles: ['planner', 'judge', 'replanner', 'coordinator'] });
    const { client } = cluster;
    const env = { REDIS_URL: inject('redisUrl'), ORQ_PREFIX: cluster.prefix, QUOTA_KEY: KEY };
    pods = new Pods(env);
    const doomed = await pods.start('worker', ['--concurrency', '1'], queueEnv(FAST_LOCKS));
    const rateLimit = { requestsPerMinute: 600, burstSeconds: 1 };
    const limit = providerLimit('openai', server.baseUrl, KEY);
    const store = new QuotaStore(client.store.redis, cluster.prefix);
    // The limit stays paused (as after a 429) in short spells, so the task's call keeps waiting,
    // a little at a time inside its job, then handed back, then inside its job again.
    let holding = true;
    const held = (async () => {
      while (holding) {
        await store.pause(limit.id, 150);
        await sleep(100);
      }
    })();
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
            rateLimit,
          },
        },
      },
    });
    const work = bullQueue(client.store.redis, cluster.prefix, 'work');
    try {
      // Killed while its job runs (not handed back) and its call holds a place.
      const callId = await eventually(
        async () => {
          const [job] = await work.getJobs(['active']);
          if (!job?.id) return undefined;
          const { entries } = await store.line(limit.id);
          return entries.some((e) => e.callId === `${job.id}|0`) ? `${job.id}|0` : undefined;
        },
        "the task's call to wait in the line while its job runs",
        30_000,
      );
      doomed.kill('SIGKILL');
      expect(await exited(doomed)).toBe('SIGKILL');
      holding = false;
      await held;
      // Its place outlives the pod (its lease), for the job when it is redelivered.
      expect((await store.line(limit.id)).entries.map((e) => e.callId)).toContain(callId);
      await pods.start('worker', ['--concurrency', '1'], queueEnv({ stalledIntervalMs: 1_000 }));
      const view = await client.wait(id, { timeoutMs: 40_000 });
      expect(view.session.state).toBe('COMPLETED');
      expect(server.requests).toHaveLength(1);
      expect((await store.line(limit.id)).entries).toEqual([]);
    } finally {
      holding = false;
      await held;
      await work.close();
    }
  }, 90_000);
});
