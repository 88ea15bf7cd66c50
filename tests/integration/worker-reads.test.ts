import { describe, expect, it } from 'vitest';
import { CommandTally } from '../../bench/lib/command-counter.js';
import { jobIds } from '../../src/shared/queues.js';
import { ALL_ROLES, clusterPerTest } from '../support/cluster.js';
import { bullQueue } from '../support/pods.js';
import { A_THEN_B, deferred, eventually, recordingModels } from '../support/scenarios.js';

const startCluster = clusterPerTest();
const NOT_WORKER = ALL_ROLES.filter((role) => role !== 'worker');

describe("the worker reads a task's dependencies", () => {
  it('with the task, in one round trip, from the ids its execute job carries', async () => {
    const { models, calls } = recordingModels(A_THEN_B);
    const cluster = await startCluster({ models, roles: NOT_WORKER });
    const worker = await cluster.startPod(['worker']);
    const tally = new CommandTally();
    tally.attach(worker.store.redis);
    const { id } = await cluster.client.submit({ instruction: 'A then B' });
    const view = await cluster.client.wait(id, { timeoutMs: 15_000 });
    expect(view.session.state).toBe('COMPLETED');

    const a = view.tasks.find((t) => t.id === 'A');
    const b = calls.execute.find((r) => r.task.id === 'B');
    expect(b?.dependencyResults).toEqual([{ taskId: 'A', title: 'A', output: a?.result?.output }]);
    // One read per execution: A's alone, B's with A's record.
    expect(tally.take()['script:orqReadTasks']).toBe(2);
  });

  it('that its execute job does not name (a job queued before the ids rode along)', async () => {
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
    // No worker while B is dispatched: its job waits, and loses the ids it carries.
    await first.close(5_000);
    releaseA.resolve();
    const work = bullQueue(cluster.client.store.redis, cluster.prefix, 'work');
    try {
      const job = await eventually(
        () => work.getJob(jobIds.execute(id, 'B', 1)),
        "B's execute job",
      );
      expect(job.data).toMatchObject({ taskId: 'B', task: { dependencies: [{ taskId: 'A' }] } });
      await job.updateData({ sessionId: id, taskId: 'B', attempt: 1 });
    } finally {
      await work.close();
    }

    await cluster.startPod(['worker']);
    const view = await cluster.client.wait(id, { timeoutMs: 15_000 });
    expect(view.session.state).toBe('COMPLETED');
    const a = view.tasks.find((t) => t.id === 'A');
    expect(calls.execute.find((r) => r.task.id === 'B')?.dependencyResults).toEqual([
      { taskId: 'A', title: 'A', output: a?.result?.output },
    ]);
  });
});
