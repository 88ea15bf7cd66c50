import { describe, expect, it } from 'vitest';
import type { TaskCard } from '../../src/shared/queues.js';
import { jobIds } from '../../src/shared/queues.js';
import { TASK_BODY_INLINE } from '../../src/shared/task-card.js';
import { ALL_ROLES, clusterPerTest } from '../support/cluster.js';
import { bullQueue } from '../support/pods.js';
import {
  A_THEN_B,
  deferred,
  eventually,
  exampleScenario,
  executionsOf,
  historyOf,
  recordingModels,
} from '../support/scenarios.js';

const startCluster = clusterPerTest();
const NOT_WORKER = ALL_ROLES.filter((role) => role !== 'worker');

/**
 * A then B with no worker while B is dispatched: B's execute job waits in the queue, where the
 * test reads it and may rewrite its card before a worker starts.
 */
async function withBWaiting(edit: (card: TaskCard) => TaskCard) {
  const judgingA = deferred();
  const releaseA = deferred();
  const { models, calls } = recordingModels(A_THEN_B, {
    beforeJudgeTask: async (r) => {
      if (r.task.id !== 'A') return;
      judgingA.resolve();
      await releaseA.promise;
    },
  });
  const cluster = await startCluster({ models, roles: NOT_WORKER });
  const first = await cluster.startPod(['worker']);
  const { id } = await cluster.client.submit({ instruction: 'A then B' });
  await judgingA.promise;
  await first.close(5_000);
  releaseA.resolve();
  const work = bullQueue(cluster.client.store.redis, cluster.prefix, 'work');
  const job = await eventually(() => work.getJob(jobIds.execute(id, 'B', 1)), "B's execute job");
  const queued = { name: job.name, data: job.data as { task: TaskCard } };
  await job.updateData({ ...queued.data, task: edit(queued.data.task) });
  await work.close();
  await cluster.startPod(['worker']);
  const view = await cluster.client.wait(id, { timeoutMs: 15_000 });
  expect(view.session.state).toBe('COMPLETED');
  const outputOfA = view.tasks.find((t) => t.id === 'A')?.result?.output;
  return { cluster, id, calls, queued, outputOfA };
}

describe('a task job carries its task', () => {
  it("is named for the task and holds it with its dependency's output; the worker uses it", async () => {
    const { cluster, id, calls, queued, outputOfA } = await withBWaiting((card) => ({
      ...card,
      dependencies: card.dependencies.map((d) => ({ ...d, output: 'from the card' })),
    }));
    expect(queued.name).toBe('execute B "B" #1');
    expect(queued.data.task).toMatchObject({
      id: 'B',
      title: 'B',
      attempt: 1,
      body: { acceptance: 'b', context: 'c' },
      dependencies: [{ taskId: 'A', title: 'A', output: outputOfA }],
    });
    // The task's version was still the card's: the worker ran on the card, reading nothing.
    expect(calls.execute.find((r) => r.task.id === 'B')?.dependencyResults).toEqual([
      { taskId: 'A', title: 'A', output: 'from the card' },
    ]);
    // The judge's job names the task too, and carries it without the dependency's output.
    const judge = bullQueue(cluster.client.store.redis, cluster.prefix, 'judge');
    try {
      const judged = await judge.getJob(jobIds.judgeTask(id, 'B', 1));
      expect(judged?.name).toBe('judge-task B "B" #1');
      expect((judged?.data as { task: TaskCard }).task.dependencies).toEqual([
        { taskId: 'A', title: 'A' },
      ]);
    } finally {
      await judge.close();
    }
  });

  it('is read again from the store when the task moved past the version the card holds', async () => {
    const { calls, outputOfA } = await withBWaiting((card) => ({
      ...card,
      version: card.version + 7,
      body: { ...card.body, acceptance: 'stale text', context: '', scopePaths: [] },
      dependencies: card.dependencies.map((d) => ({ ...d, output: 'from the card' })),
    }));
    const b = calls.execute.find((r) => r.task.id === 'B');
    expect(b?.task.acceptance).toBe('b');
    expect(b?.dependencyResults).toEqual([{ taskId: 'A', title: 'A', output: outputOfA }]);
  });
});

describe('a task too long to copy', () => {
  it("rides in its job by name and reference; the worker reads it and its dependency's output", async () => {
    const context = 'c'.repeat(TASK_BODY_INLINE);
    const { models, calls } = recordingModels({
      ...A_THEN_B,
      plans: [
        {
          tasks: [
            { id: 'A', title: 'A', acceptance: 'a', context: 'c' },
            { id: 'B', title: 'B', acceptance: 'b', context, dependencies: ['A'] },
          ],
        },
      ],
    });
    const cluster = await startCluster({ models });
    const { id } = await cluster.client.submit({ instruction: 'A then B' });
    const view = await cluster.client.wait(id, { timeoutMs: 15_000 });
    expect(view.session.state).toBe('COMPLETED');
    const work = bullQueue(cluster.client.store.redis, cluster.prefix, 'work');
    try {
      const job = await work.getJob(jobIds.execute(id, 'B', 1));
      expect(job?.name).toBe('execute B "B" #1');
      expect((job?.data as { task: TaskCard }).task.body).toBeUndefined();
    } finally {
      await work.close();
    }
    const executed = calls.execute.find((r) => r.task.id === 'B');
    expect(executed?.task.context).toBe(context);
    expect(executed?.dependencyResults).toEqual([
      { taskId: 'A', title: 'A', output: view.tasks.find((t) => t.id === 'A')?.result?.output },
    ]);
  });
});

describe("an execution's result in its judge job", () => {
  it('is copied when short, and referenced when long: the judge reads it and judges it', async () => {
    // Past TASK_BODY_INLINE as JSON: referenced. Two attempts, so each has its own stored copy.
    const long = (n: number) => `${n}`.repeat(TASK_BODY_INLINE + 100);
    const { models, calls } = recordingModels({
      ...A_THEN_B,
      tasks: {
        A: {
          results: [{ output: long(1) }, { output: long(2) }],
          judgements: [
            { success: false, shouldContinue: true, reason: 'go on' },
            { success: true, reason: 'fine' },
          ],
        },
        B: { results: [{ output: 'short' }] },
      },
    });
    const cluster = await startCluster({ models });
    const { id } = await cluster.client.submit({ instruction: 'A then B' });
    const view = await cluster.client.wait(id, { timeoutMs: 15_000 });
    expect(view.session.state).toBe('COMPLETED');

    const redis = cluster.client.store.redis;
    const judge = bullQueue(redis, cluster.prefix, 'judge');
    const coordinator = bullQueue(redis, cluster.prefix, 'coordinator');
    try {
      for (const attempt of [1, 2]) {
        const job = await judge.getJob(jobIds.judgeTask(id, 'A', attempt));
        expect(job?.data).toMatchObject({ storedResult: true });
        expect(job?.data).not.toHaveProperty('result');
        expect(JSON.stringify(job?.data).length).toBeLessThan(2048);
        const event = await coordinator.getJob(jobIds.taskJudged(id, 'A', attempt));
        expect(event?.data).toMatchObject({ storedResult: true });
        expect(JSON.stringify(event?.data).length).toBeLessThan(2048);
      }
      const short = await judge.getJob(jobIds.judgeTask(id, 'B', 1));
      expect(short?.data).toMatchObject({ result: { output: 'short' } });
      expect(short?.data).not.toHaveProperty('storedResult');
      // Recorded with the task and in its history, the stored copies are gone.
      expect(await redis.hlen(cluster.client.store.keys(id).results)).toBe(0);
    } finally {
      await judge.close();
      await coordinator.close();
    }
    // The judge judged each attempt's own result, and the verdicts were applied with it.
    const judgedA = calls.judgeTask.filter((r) => r.task.id === 'A');
    expect(judgedA.map((r) => [r.attempt, r.result.output])).toEqual([
      [1, long(1)],
      [2, long(2)],
    ]);
    const a = view.tasks.find((t) => t.id === 'A');
    expect(a).toMatchObject({ state: 'DONE', attempts: 2, result: { output: long(2) } });
    expect(
      executionsOf(await historyOf(cluster.client, id), 'A').map((e) => e.result.output),
    ).toEqual([long(1), long(2)]);
  });
});

describe('a replan and the tasks it makes', () => {
  it('carry the task, its verdict, its result and where it sits in the replan chain', async () => {
    const { models, calls } = recordingModels(exampleScenario('replan-task.yaml'));
    const cluster = await startCluster({ models });
    const { id } = await cluster.client.submit({ instruction: 'login' });
    const view = await cluster.client.wait(id, { timeoutMs: 15_000 });
    expect(view.session.state).toBe('COMPLETED');
    const redis = cluster.client.store.redis;
    const replanQueue = bullQueue(redis, cluster.prefix, 'replan');
    const work = bullQueue(redis, cluster.prefix, 'work');
    try {
      const replan = await replanQueue.getJob(jobIds.replan(id, 't2', 1));
      expect(replan?.name).toBe('replan-task t2 "Validate the login input" #1');
      expect(replan?.data).toMatchObject({
        task: { id: 't2', attempt: 1, dependencies: [{ taskId: 't1' }] },
        judgement: { shouldReplan: true },
        result: { output: expect.any(String) as unknown },
      });
      // The replanner acted on the job's task and result, as the store holds them.
      const t2 = view.tasks.find((t) => t.id === 't2');
      expect(calls.replan[0]?.task).toMatchObject({ id: 't2', acceptance: t2?.acceptance });
      expect(calls.replan[0]?.result?.output).toBe(t2?.result?.output);

      const subtask = view.tasks.find((t) => t.replanningInfo?.originalTaskId === 't2');
      expect(subtask).toBeDefined();
      const sub = await work.getJob(jobIds.execute(id, subtask?.id ?? '', 1));
      expect(sub?.name).toBe(`execute ${subtask?.id} ${JSON.stringify(subtask?.title)} #1`);
      expect((sub?.data as { task: TaskCard }).task.replanningInfo).toMatchObject({
        iteration: 1,
        originalTaskId: 't2',
      });
    } finally {
      await replanQueue.close();
      await work.close();
    }
  });
});

describe('queues.taskJobNames plain', () => {
  it('adds task jobs under their bare names, as pods before task cards route them', async () => {
    const { models } = recordingModels(A_THEN_B);
    const cluster = await startCluster({ models, config: { queues: { taskJobNames: 'plain' } } });
    const { id } = await cluster.client.submit({ instruction: 'A then B' });
    expect((await cluster.client.wait(id, { timeoutMs: 15_000 })).session.state).toBe('COMPLETED');
    const work = bullQueue(cluster.client.store.redis, cluster.prefix, 'work');
    try {
      const job = await work.getJob(jobIds.execute(id, 'B', 1));
      expect(job?.name).toBe('execute');
      expect(job?.data).toMatchObject({ task: { id: 'B', attempt: 1 } });
    } finally {
      await work.close();
    }
  });
});

describe('a role given a task job whose task moved on', () => {
  it('refuses it before any model call, though the job carries the whole task', async () => {
    const runningB = deferred();
    const releaseB = deferred();
    const { models, calls } = recordingModels(A_THEN_B, {
      beforeExecute: async (r) => {
        if (r.task.id !== 'B') return;
        runningB.resolve();
        await releaseB.promise;
      },
    });
    const cluster = await startCluster({ models });
    const { id } = await cluster.client.submit({ instruction: 'A then B' });
    // A is DONE and the session runs (B holds it open).
    await runningB.promise;
    const executions = calls.execute.length;
    const judgements = calls.judgeTask.length;
    const redis = cluster.client.store.redis;
    const work = bullQueue(redis, cluster.prefix, 'work');
    const judge = bullQueue(redis, cluster.prefix, 'judge');
    try {
      // Its execute and judge jobs, delivered again as new jobs, are stale.
      const done = await work.getJob(jobIds.execute(id, 'A', 1));
      const judged = await judge.getJob(jobIds.judgeTask(id, 'A', 1));
      expect(done && judged).toBeTruthy();
      const again = await work.add(done?.name ?? '', done?.data, { jobId: 'again-work-A' });
      const againJudge = await judge.add(judged?.name ?? '', judged?.data, {
        jobId: 'again-judge-A',
      });
      const returned = async (queue: typeof work, jobId: string) =>
        eventually(
          async () => ((await queue.getJob(jobId))?.returnvalue as string | null) ?? undefined,
          jobId,
        );
      expect(await returned(work, again.id ?? '')).toBe('stale');
      expect(await returned(judge, againJudge.id ?? '')).toBe('stale');
    } finally {
      await work.close();
      await judge.close();
    }
    expect(calls.execute.length).toBe(executions);
    expect(calls.judgeTask.length).toBe(judgements);
    releaseB.resolve();
    expect((await cluster.client.wait(id, { timeoutMs: 15_000 })).session.state).toBe('COMPLETED');
  });
});

describe('loadForTask with the versions a caller holds', () => {
  it('sends a task only when its version is not the one held', async () => {
    const { models } = recordingModels(A_THEN_B);
    const cluster = await startCluster({ models });
    const { id } = await cluster.client.submit({ instruction: 'A then B' });
    await cluster.client.wait(id, { timeoutMs: 15_000 });
    const store = cluster.client.store;
    const { tasks } = await store.loadForTask(id, ['A']);
    const version = tasks.get('A')?.version ?? 0;
    expect(version).toBeGreaterThan(0);

    const same = await store.loadForTask(id, ['A', 'B'], undefined, new Map([['A', version]]));
    expect([...same.unchanged]).toEqual(['A']);
    expect([...same.tasks.keys()]).toEqual(['B']);
    expect(same.snapshot?.session.state).toBe('COMPLETED');

    const moved = await store.loadForTask(id, ['A'], undefined, new Map([['A', version - 1]]));
    expect(moved.unchanged.size).toBe(0);
    expect(moved.tasks.get('A')?.version).toBe(version);
  });
});
