import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, afterEach, describe, expect, inject, it } from 'vitest';
import type { Job } from 'bullmq';
import { root, spawnOrq } from '../support/cli.js';
import { startCluster, type TestCluster } from '../support/cluster.js';
import { bullQueue, exited, FAST_LOCKS, Pods, queueEnv } from '../support/pods.js';
import { tempFilesPerFile } from '../support/temp-files.js';
import { eventually, executionsOf, historyOf, scenarioDir } from '../support/scenarios.js';

let cluster: TestCluster | undefined;
let pods: Pods | undefined;
const scenarios = scenarioDir();
const temp = tempFilesPerFile('orq-shutdown-');
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
      await eventually(async () => {
        // Fair release adds work jobs with a priority: they wait as 'prioritized'.
        const counts = await work.getJobCounts('waiting', 'prioritized');
        return counts.waiting! + counts.prioritized! === 3 ? true : undefined;
      }, 'the second session’s jobs to be queued');
      const waiting = (await work.getJobs(['waiting', 'prioritized'])).map(
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

describe('a SIGTERM at start-up', () => {
  it('stops the pod as it would later, exit 0, though it came before the pod started', async () => {
    // A module hook sends the pod SIGTERM as it loads its commands, long before it has read
    // its config and said it is starting (sent from outside, the signal came too late on a
    // fast machine: the pod had started its roles by then).
    const loaded = temp.write('loaded.txt', '');
    const pod = spawnOrq(['start', '--roles', 'worker'], {
      env: {
        REDIS_URL: inject('redisUrl'),
        ORQ_PREFIX: 'sigterm-at-start',
        ORQ_LOG_LEVEL: 'info',
        ORQ_TEST_LOADED_FILE: loaded,
        ORQ_TEST_SIGTERM_AT: '/producers/cli/program.js',
      },
      preload: [pathToFileURL(join(root, 'tests/support/record-loads.mjs')).href],
    });
    let output = '';
    pod.stdout!.on('data', (chunk: Buffer) => (output += chunk.toString()));
    pod.stderr!.on('data', (chunk: Buffer) => (output += chunk.toString()));
    expect(await exited(pod), output).toBe(0);
    expect(readFileSync(loaded, 'utf8')).toContain('/producers/cli/program.js');
    // Node 20 hands the pod the signal before it starts its roles: it starts none. Node 24
    // loads the commands without a turn of the event loop and sees the signal only once its
    // roles run; then it stops them as a later SIGTERM would. Either way: exit 0, not death by
    // the signal, which is what a handler installed late gave.
    if (!output.includes('roles started')) expect(output).toContain('no job was taken');
    else expect(output).toContain('shutting down');
  }, 60_000);
});
