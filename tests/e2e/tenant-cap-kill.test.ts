import { afterAll, afterEach, describe, expect, inject, it } from 'vitest';
import { createConnection, type RedisConnection } from '../../src/shared/redis.js';
import { silentLogger } from '../../src/shared/logger.js';
import { TenantSlots } from '../../src/shared/store/tenant-slots.js';
import { startCluster, type TestCluster } from '../support/cluster.js';
import { startFakeLlmServer, type FakeLlmServer } from '../support/fake-llm-server.js';
import { bullQueue, exited, Pods, queueEnv } from '../support/pods.js';
import { eventually, scenarioDir } from '../support/scenarios.js';

/** The lock, and so the tenant slot's lease, of the pod the test kills. */
const DOOMED_LOCKS = { lockDurationMs: 4_000, stalledIntervalMs: 1_000 };

let cluster: TestCluster | undefined;
let pods: Pods | undefined;
let server: FakeLlmServer | undefined;
let redis: RedisConnection | undefined;
const scenarios = scenarioDir();
afterEach(async () => {
  await pods?.stopAll();
  pods = undefined;
  await cluster?.close();
  cluster = undefined;
  await server?.close();
  server = undefined;
  redis?.disconnect();
  redis = undefined;
});
afterAll(() => scenarios.cleanup());

describe('kill -9 of a worker pod while its task holds its tenant slot', () => {
  it('the slot is held while the pod lives, lapses after its lease, and every task then runs', async () => {
    // The first call never gets an answer: the pod holds the tenant's only slot when killed.
    let calls = 0;
    server = await startFakeLlmServer('openai', () =>
      (calls += 1) === 1 ? { hang: true } : { json: { output: 'written', log: '' } },
    );
    cluster = await startCluster({ roles: ['planner', 'judge', 'replanner', 'coordinator'] });
    const { client } = cluster;
    redis = createConnection(inject('redisUrl'), 'consumer', silentLogger);
    const slots = new TenantSlots(redis, cluster.prefix);
    const env = {
      REDIS_URL: inject('redisUrl'),
      ORQ_PREFIX: cluster.prefix,
      KILL_KEY: 'sk-tenant-kill',
      ORQ__tenants__maxTasksInFlight: '1',
    };
    pods = new Pods(env);
    // Short locks for the pod that dies, so its jobs are redelivered soon after the kill; not
    // the shortest (FAST_LOCKS), whose renewals a busy machine can miss while the pod lives.
    const doomed = await pods.start('worker', ['--concurrency', '2'], queueEnv(DOOMED_LOCKS));
    const task = (id: string) => ({ id, title: id, acceptance: 'a', context: 'c' });
    const scenario = scenarios.write('two-tasks', {
      plans: [{ tasks: [task('A'), task('B')] }],
      planJudgements: [{ score: 95, isAcceptable: true }],
    });
    const { id } = await client.submit({
      instruction: 'two tasks of one capped tenant',
      tenant: 'acme',
      config: {
        llm: {
          scenario,
          worker: {
            provider: 'openai',
            model: 'test',
            baseUrl: server.baseUrl,
            apiKeyEnv: 'KILL_KEY',
          },
        },
      },
    });
    // One task holds the slot with its call hanging; the other is handed back, waiting for it,
    // for longer than a lease: the live pod renews it.
    const queue = bullQueue(redis, cluster.prefix, 'work');
    try {
      await eventually(
        async () => {
          const delayed = await queue.getDelayed();
          const waiting = delayed.some(
            (job) =>
              (job.progress as { activity?: string }).activity ===
              'waiting for a tenant slot (acme)',
          );
          return waiting && calls === 1 && (await queue.getActiveCount()) === 1 ? true : undefined;
        },
        'one task running, the other waiting for the slot',
        30_000,
      );
    } finally {
      await queue.close();
    }
    await new Promise((r) => setTimeout(r, DOOMED_LOCKS.lockDurationMs * 1.5));
    expect(await slots.inFlight('acme')).toBe(1);
    expect(calls).toBe(1);

    doomed.kill('SIGKILL');
    expect(await exited(doomed)).toBe('SIGKILL');
    await eventually(
      async () => ((await slots.inFlight('acme')) === 0 ? true : undefined),
      'the dead pod lease to lapse',
      30_000,
    );

    // The default lock for the pod that takes over: a busy machine that delays one of its
    // renewals must not redeliver a job a second time (a fourth call).
    await pods.start('worker', ['--concurrency', '2'], queueEnv({ stalledIntervalMs: 1_000 }));
    const view = await client.wait(id, { timeoutMs: 40_000 });
    expect(view.session.state).toBe('COMPLETED');
    expect(calls).toBe(3);
    expect(await slots.inFlight('acme')).toBe(0);
  }, 90_000);
});
