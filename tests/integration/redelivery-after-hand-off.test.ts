import { resolve } from 'node:path';
import type { Job, Worker } from 'bullmq';
import { describe, expect, it } from 'vitest';
import { jobIds, type QueueName } from '../../src/shared/queues.js';
import type { RunningRoles } from '../../src/workers/registry.js';
import { HANDED_ON } from '../../src/workers/roles/context.js';
import { root } from '../support/cli.js';
import { clusterPerTest } from '../support/cluster.js';
import { A_THEN_B, deferred, eventually, recordingModels } from '../support/scenarios.js';

const startCluster = clusterPerTest();
const TIMEOUT = 20_000;
const replanTask = resolve(root, 'examples/scenarios/replan-task.yaml');

/** The job once it has finished (BullMQ keeps completed jobs), or a failure of the test. */
async function completed(pod: RunningRoles, queue: QueueName, jobId: string): Promise<Job> {
  return eventually(async () => {
    const job = await pod.queues.get(queue).getJob(jobId);
    return job && (await job.getState()) === 'completed' ? job : undefined;
  }, `${queue} job ${jobId} completed`);
}

/**
 * BullMQ delivers the job again, as after its process died between handing its result on and
 * marking the job done: same id, same payload, one more attempt started. Returns what the
 * second run returned.
 */
async function deliverAgain(pod: RunningRoles, queue: QueueName, jobId: string): Promise<unknown> {
  const first = await completed(pod, queue, jobId);
  await first.retry('completed');
  // The retry removes finishedOn; the second run's finish sets it again in the script that
  // stores its return value. A read without it is of the job waiting or running, even if the
  // job has completed by the time getState answers.
  const again = await eventually(async () => {
    const job = await pod.queues.get(queue).getJob(jobId);
    return job?.finishedOn && (await job.getState()) === 'completed' ? job : undefined;
  }, `${queue} job ${jobId} delivered again`);
  expect(again.attemptsStarted).toBe(2);
  return again.returnvalue;
}

function coordinatorOf(pod: RunningRoles): Worker {
  const worker = pod.workers.find((w) => w.name === 'coordinator');
  if (!worker) throw new Error('the pod runs no coordinator');
  return worker;
}

/**
 * A role job whose result is already handed on (the next job or event exists under its
 * deterministic id) is not run again when BullMQ delivers it again while its task or plan is
 * still current: no second model call, no repeated side effects, nothing counted twice.
 */
describe('a role job delivered again after it handed its result on', () => {
  it('neither executes nor judges the task again', async () => {
    const judging = deferred();
    const release = deferred();
    const { models, calls } = recordingModels(A_THEN_B, {
      beforeJudgeTask: async (request) => {
        if (request.task.id !== 'A') return;
        judging.resolve();
        await release.promise;
      },
    });
    const cluster = await startCluster({ models });
    const pod = cluster.pods[0]!;
    const { id } = await cluster.client.submit({ instruction: 'A then B' });

    // The judge holds A's judgement: A is still RUNNING, and its result is in the judge's job.
    await judging.promise;
    expect((await pod.store.loadTask(id, 'A'))?.task.state).toBe('RUNNING');
    expect(await deliverAgain(pod, 'work', jobIds.execute(id, 'A', 1))).toBe(HANDED_ON);
    expect(calls.execute.filter((r) => r.task.id === 'A')).toHaveLength(1);

    // The coordinator holds A's verdict: A is still RUNNING, and the verdict is in its event.
    await coordinatorOf(pod).pause();
    release.resolve();
    expect(await deliverAgain(pod, 'judge', jobIds.judgeTask(id, 'A', 1))).toBe(HANDED_ON);
    expect((await pod.store.loadTask(id, 'A'))?.task.state).toBe('RUNNING');
    expect(calls.judgeTask.filter((r) => r.task.id === 'A')).toHaveLength(1);

    coordinatorOf(pod).resume();
    const view = await cluster.client.wait(id, { timeoutMs: TIMEOUT });
    expect(view.session.state).toBe('COMPLETED');
    // One execution and one judgement of A, each counted once.
    expect(view.usage.byTask.A?.calls).toBe(2);
  });

  it('looks for the hand-off of the job’s latest delivery, not its first', async () => {
    const judging = deferred();
    const release = deferred();
    const { models, calls } = recordingModels(A_THEN_B, {
      // A's first delivery fails before it hands anything on; BullMQ retries the job.
      beforeExecute: (request) => {
        if (request.task.id === 'A' && calls.execute.length === 1) throw new Error('flaky');
      },
      beforeJudgeTask: async (request) => {
        if (request.task.id !== 'A') return;
        judging.resolve();
        await release.promise;
      },
    });
    const cluster = await startCluster({ models, config: { queues: { backoffMs: 10 } } });
    const pod = cluster.pods[0]!;
    const { id } = await cluster.client.submit({ instruction: 'A then B' });

    // The second delivery (fence 2) handed its result on; the judge holds it.
    await judging.promise;
    const workJob = jobIds.execute(id, 'A', 1);
    const first = await completed(pod, 'work', workJob);
    expect(first.attemptsStarted).toBe(2);
    await first.retry('completed');
    const third = await eventually(async () => {
      const job = await pod.queues.get('work').getJob(workJob);
      return job?.finishedOn && (await job.getState()) === 'completed' ? job : undefined;
    }, 'the work job delivered a third time');
    expect(third.attemptsStarted).toBe(3);
    expect(third.returnvalue).toBe(HANDED_ON);
    expect(calls.execute.filter((r) => r.task.id === 'A')).toHaveLength(2);

    // The verdict on the second delivery's result is the one applied.
    release.resolve();
    const view = await cluster.client.wait(id, { timeoutMs: TIMEOUT });
    expect(view.session.state).toBe('COMPLETED');
    expect(calls.judgeTask.filter((r) => r.task.id === 'A')).toHaveLength(1);
  });

  it('does not plan the same attempt again', async () => {
    const judging = deferred();
    const release = deferred();
    const { models, calls } = recordingModels(A_THEN_B, {
      beforeJudgePlan: async () => {
        judging.resolve();
        await release.promise;
      },
    });
    const cluster = await startCluster({ models });
    const pod = cluster.pods[0]!;
    const { id } = await cluster.client.submit({ instruction: 'A then B' });

    await judging.promise;
    expect(await deliverAgain(pod, 'plan', jobIds.plan(id, 0))).toBe(HANDED_ON);
    expect(calls.plan).toHaveLength(1);
    release.resolve();
    expect((await cluster.client.wait(id, { timeoutMs: TIMEOUT })).session.state).toBe('COMPLETED');
    expect(calls.plan).toHaveLength(1);
  });

  it('does not replan the same task again', async () => {
    const holder: { pod?: RunningRoles } = {};
    const { models, calls } = recordingModels(replanTask, {
      // The coordinator holds the replan's result: t2 still waits for its subtasks.
      beforeReplan: async () => {
        if (holder.pod) await coordinatorOf(holder.pod).pause();
      },
    });
    const cluster = await startCluster({ models });
    const pod = (holder.pod = cluster.pods[0]!);
    const { id } = await cluster.client.submit({ instruction: 'login with validation' });

    const replanId = jobIds.replan(id, 't2', 1);
    await completed(pod, 'replan', replanId);
    expect((await pod.store.loadTask(id, 't2'))?.task.replanPending).toBe(true);
    expect(await deliverAgain(pod, 'replan', replanId)).toBe(HANDED_ON);
    expect(calls.replan).toHaveLength(1);

    coordinatorOf(pod).resume();
    const view = await cluster.client.wait(id, { timeoutMs: TIMEOUT });
    expect(view.session.state).toBe('COMPLETED');
    expect(view.tasks.find((t) => t.id === 't2')?.state).toBe('REPLACED_BY_REPLAN');
    expect(calls.replan).toHaveLength(1);
  });
});
