import { afterAll, afterEach, describe, expect, inject, it } from 'vitest';
import type { Job } from 'bullmq';
import { startCluster, type TestCluster } from '../support/cluster.js';
import { bullQueue, exited, Pods, queueEnv } from '../support/pods.js';
import { eventually, executionsOf, historyOf, scenarioDir } from '../support/scenarios.js';

let cluster: TestCluster | undefined;
let pods: Pods | undefined;
const scenarios = scenarioDir();
afterEach(async () => {
  await pods?.stopAll();
  await cluster?.close();
  cluster = pods = undefined;
});
afterAll(() => scenarios.cleanup());

/** Two independent tasks: with one job at a time, one runs while the other waits. */
const twoTasks = scenarios.write('two-tasks', {
  plans: [
    {
      tasks: [
        { id: 'A', title: 'A', acceptance: 'a', context: 'c' },
        { id: 'B', title: 'B', acceptance: 'b', context: 'c' },
      ],
    },
  ],
  planJudgements: [{ score: 90, isAcceptable: true }],
});
const FAST_LOCKS = { lockDurationMs: 2_000, stalledIntervalMs: 1_000 };

/** Everything but workers in this process; workers are `orq start --roles worker` processes. */
async function setUp() {
  cluster = await startCluster({ roles: ['planner', 'judge', 'replanner', 'coordinator'] });
  pods = new Pods({
    REDIS_URL: inject('redisUrl'),
    ORQ_PREFIX: cluster.prefix,
    ...queueEnv(FAST_LOCKS),
  });
  const work = bullQueue(cluster.client.store.redis, cluster.prefix, 'work');
  const submit = async () =>
    (await cluster!.client.submit({ instruction: 'x', config: { llm: { scenario: twoTasks } } }))
      .id;
  return { client: cluster.client, pods, work, submit };
}

const activeJob = (work: ReturnType<typeof bullQueue>) =>
  eventually(
    async () => {
      const [job] = await work.getActive();
      return job ?? undefined;
    },
    'a job to be active in the worker',
    20_000,
  );

const stateOf = async (job: Job | undefined) => job && (await job.getState());

describe('graceful shutdown on SIGTERM', () => {
  it('finishes the active job, takes no new one, and exits 0', async () => {
    const { client, pods, work, submit } = await setUp();
    try {
      const pod = await pods.start('worker', [
        '--concurrency',
        '1',
        '--latency',
        '3000',
        '--shutdown-timeout',
        '30000',
      ]);
      const first = await submit();
      const running = await activeJob(work);
      const runningTask = (running.data as { taskId: string }).taskId;
      const waitingTask = runningTask === 'A' ? 'B' : 'A';

      pod.kill('SIGTERM');
      // Submitted after the SIGTERM: its jobs are queued while the pod is closing.
      const second = await submit();
      expect(await exited(pod)).toBe(0);

      // The active job ran to its end: completed in BullMQ, and judged and applied.
      expect(await stateOf(await work.getJob(running.id!))).toBe('completed');
      await eventually(
        async () =>
          executionsOf(await historyOf(client, first), runningTask).length === 1 ? true : undefined,
        `the execution of ${runningTask} to be applied`,
      );
      // Nothing else was taken: the other task of the first session and both tasks of the
      // second (queued after the SIGTERM once its plan was accepted) wait for another worker.
      await eventually(
        async () => ((await work.getWaitingCount()) === 3 ? true : undefined),
        'the second session’s jobs to be queued',
      );
      const waiting = (await work.getWaiting()).map(
        (j) =>
          `${(j.data as { sessionId: string }).sessionId === first ? 1 : 2}:${(j.data as { taskId: string }).taskId}`,
      );
      expect(waiting.sort()).toEqual([`1:${waitingTask}`, '2:A', '2:B']);
      expect(await work.getActiveCount()).toBe(0);
      expect(executionsOf(await historyOf(client, first), waitingTask)).toEqual([]);

      await pods.start('worker');
      for (const id of [first, second]) {
        const view = await client.wait(id, { timeoutMs: 30_000 });
        expect(view.session.state).toBe('COMPLETED');
        const h = await historyOf(client, id);
        for (const task of ['A', 'B']) expect(executionsOf(h, task)).toHaveLength(1);
      }
    } finally {
      await work.close();
    }
  }, 90_000);

  it('exits within its shutdown timeout when a job outlasts it, handing the job back to run once elsewhere', async () => {
    const { client, pods, work, submit } = await setUp();
    try {
      // Model calls of a minute: the job cannot finish within the 1.5 s the pod is given.
      const pod = await pods.start('worker', [
        '--concurrency',
        '1',
        '--latency',
        '60000',
        '--shutdown-timeout',
        '1500',
      ]);
      const id = await submit();
      const running = await activeJob(work);
      const signalled = Date.now();
      pod.kill('SIGTERM');
      expect(await exited(pod)).toBe(0);
      // The bound: the shutdown timeout plus time to close connections, far below the minute.
      expect(Date.now() - signalled).toBeLessThan(15_000);

      // It was handed back to the queue (no attempt spent, no stall) and another worker runs it, once.
      await pods.start('worker');
      const view = await client.wait(id, { timeoutMs: 30_000 });
      expect(view.session.state).toBe('COMPLETED');
      const h = await historyOf(client, id);
      for (const task of ['A', 'B']) expect(executionsOf(h, task)).toHaveLength(1);
      const job = await work.getJob(running.id!);
      expect(job).toMatchObject({
        stalledCounter: 0,
        attemptsMade: 1,
        finishedOn: expect.any(Number),
      });
    } finally {
      await work.close();
    }
  }, 90_000);
});
