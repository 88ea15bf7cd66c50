import { describe, expect, it } from 'vitest';
import type { HistoryEntry } from '../../src/shared/domain/history.js';
import { jobIds } from '../../src/shared/queues.js';
import { LOCK_LEASE_SHARE } from '../../src/workers/delivery.js';
import type { RunningRoles } from '../../src/workers/registry.js';
import { clusterPerTest } from '../support/cluster.js';
import { FAST_LOCKS } from '../support/pods.js';
import {
  A_THEN_B,
  decisions,
  deferred,
  eventually,
  executionsOf,
  historyOf,
  recordingModels,
} from '../support/scenarios.js';

const startCluster = clusterPerTest();

/**
 * Issue 35: a role job whose lock another delivery holds by the time its model call returns
 * (its pod was paused or cut off past the lock) hands nothing on. The job's next delivery does
 * the work and hands its own result on.
 */
describe('a role job that lost its lock during its model call', () => {
  it('hands no verdict on; the next delivery judges the task, and one verdict is applied', async () => {
    const judging = deferred();
    const release = deferred();
    let held = false;
    const { models, calls } = recordingModels(A_THEN_B, {
      beforeJudgeTask: async (request) => {
        if (request.task.id !== 'A' || held) return;
        held = true;
        judging.resolve();
        await release.promise;
      },
    });
    const cluster = await startCluster({ models, config: { queues: FAST_LOCKS } });
    const pod = cluster.pods[0]!;
    const { id } = await cluster.client.submit({ instruction: 'A then B' });

    await judging.promise;
    // Another delivery holds the job now, for a while (as after its lock lapsed and BullMQ
    // gave the job to another pod, which then died in turn).
    const lockKey = `${pod.queues.get('judge').toKey(jobIds.judgeTask(id, 'A', 1))}:lock`;
    await pod.store.redis.set(lockKey, 'another-delivery', 'PX', FAST_LOCKS.lockDurationMs);
    // Which can only be once this delivery's lease on its lock is over (delivery.ts): within
    // it, the lock is this delivery's still, and the hand-off asks Redis nothing.
    await new Promise((r) => setTimeout(r, FAST_LOCKS.lockDurationMs * LOCK_LEASE_SHARE + 100));
    release.resolve();

    const view = await cluster.client.wait(id, { timeoutMs: 30_000 });
    expect(view.session.state).toBe('COMPLETED');
    // Judged twice: the first delivery's verdict was not handed on, so the next one judged.
    expect(calls.judgeTask.filter((r) => r.task.id === 'A')).toHaveLength(2);
    const verdicts = (await historyOf(cluster.client, id)).filter(
      (e) => e.type === 'judgement' && e.subject === 'task' && e.taskId === 'A',
    );
    expect(verdicts).toHaveLength(1);
  });
});

/**
 * Takes the lock of task A's work job from its delivery for a moment (as nobody we know), then
 * lets it lapse: the delivery has lost the job, and BullMQ delivers it again.
 */
async function loseLockOfA(pod: RunningRoles, sessionId: string): Promise<void> {
  const workJob = jobIds.execute(sessionId, 'A', 1);
  const lockKey = `${pod.queues.get('work').toKey(workJob)}:lock`;
  await pod.store.redis.set(lockKey, 'another-delivery', 'PX', 200);
}

/**
 * Issue 35: the check that a delivery still holds its job, and its hand-off, are two steps; a
 * pause between them (SIGSTOP, a long GC) lets BullMQ give the job to another delivery first.
 * Each work delivery takes a fence as it reads its task, and the coordinator refuses a result
 * whose fence a later delivery of the job has passed.
 */
describe('a work delivery that hands on after a later delivery of its job started', () => {
  it('has its result refused; the later delivery’s result is the one applied', async () => {
    const firstPaused = deferred();
    const releaseFirst = deferred();
    const secondRunning = deferred();
    const releaseSecond = deferred();
    let executions = 0;
    const { models } = recordingModels(A_THEN_B, {
      // The second delivery of A waits, once it has taken its fence, until the first one's
      // result has reached the coordinator.
      beforeExecute: async (request) => {
        if (request.task.id !== 'A' || ++executions !== 2) return;
        secondRunning.resolve();
        await releaseSecond.promise;
      },
    });
    // Each delivery's result names the delivery.
    const execute = models.execute.bind(models);
    models.execute = async (request) => ({
      ...(await execute(request)),
      ...(request.task.id === 'A' ? { output: `delivery ${executions}` } : {}),
    });
    const cluster = await startCluster({ models, config: { queues: FAST_LOCKS } });
    const pod = cluster.pods[0]!;
    // The first delivery of A stops right before it hands its result on: past its check that
    // it holds the job, as a process paused there.
    const add = pod.queues.add.bind(pod.queues);
    let handOffs = 0;
    pod.queues.add = async (job) => {
      if (job.queue === 'judge' && (job.data as { taskId?: string }).taskId === 'A') {
        if (++handOffs === 1) {
          firstPaused.resolve();
          await releaseFirst.promise;
        }
      }
      return add(job);
    };
    const { id } = await cluster.client.submit({ instruction: 'A then B' });

    await firstPaused.promise;
    // Its lock lapses: BullMQ finds the job stalled and delivers it again, on a second worker
    // pod as the first pod's is busy.
    await loseLockOfA(pod, id);
    await cluster.startPod(['worker']);
    await secondRunning.promise;

    // The paused delivery goes on and hands on its result, which is judged: the coordinator
    // refuses it, as a later delivery took a higher fence.
    releaseFirst.resolve();
    const refusal = (history: HistoryEntry[]) =>
      decisions(history, 'event:ignored').filter((d) => d.reason.includes('superseded delivery'));
    // The verdict on the first delivery's result, refused or (without the fence) applied.
    const seen = await eventually(
      async () => {
        const history = await historyOf(cluster.client, id);
        return refusal(history).length + executionsOf(history, 'A').length > 0
          ? history
          : undefined;
      },
      'the verdict on the first delivery’s result at the coordinator',
      20_000,
    );
    expect(executionsOf(seen, 'A')).toEqual([]);
    expect(refusal(seen).map((d) => d.reason)).toEqual([
      expect.stringContaining('attempt 1 comes from a superseded delivery (fence 1)'),
    ]);
    expect((await pod.store.loadTask(id, 'A'))?.task.state).toBe('RUNNING');

    releaseSecond.resolve();
    const view = await cluster.client.wait(id, { timeoutMs: 30_000 });
    expect(view.session.state).toBe('COMPLETED');
    const history = await historyOf(cluster.client, id);
    expect(executionsOf(history, 'A').map((e) => e.result.output)).toEqual(['delivery 2']);
    // The execution names its delivery's fence: the session view links that judge job.
    expect(executionsOf(history, 'A').map((e) => e.fence)).toEqual([2]);
    expect(view.tasks.find((t) => t.id === 'A')?.result?.output).toBe('delivery 2');
  });
});

/**
 * The same pause with a result too long to ride in the judge job: the paused delivery stores it
 * for the judge before it hands on. Its fence is refused there, so it neither overwrites nor
 * leaves a stored result behind, and hands nothing on.
 */
describe('a work delivery that stores a long result after a later delivery of its job started', () => {
  it('stores nothing and hands nothing on; no stored result is left once the task is judged', async () => {
    const firstPaused = deferred();
    const releaseFirst = deferred();
    let executions = 0;
    const { models } = recordingModels(A_THEN_B);
    const execute = models.execute.bind(models);
    models.execute = async (request) => {
      const result = await execute(request);
      if (request.task.id !== 'A') return result;
      executions += 1;
      // Over the 8 KB a judge job carries: stored, then referenced.
      return { ...result, output: `delivery ${executions} ${'x'.repeat(10_000)}` };
    };
    const cluster = await startCluster({ models, config: { queues: FAST_LOCKS } });
    const pod = cluster.pods[0]!;
    // The first delivery stops right before it stores its result: as a process paused there.
    const statuses: string[] = [];
    const putResult = pod.store.putResult.bind(pod.store);
    let stores = 0;
    pod.store.putResult = async (...args) => {
      if (++stores > 1) return putResult(...args);
      firstPaused.resolve();
      await releaseFirst.promise;
      const status = await putResult(...args);
      statuses.push(status);
      return status;
    };
    const { id } = await cluster.client.submit({ instruction: 'A then B' });

    await firstPaused.promise;
    await loseLockOfA(pod, id);
    // Delivered again (on this pod or a second one): that delivery stores its result, and it
    // is judged and recorded while the first is still paused.
    await cluster.startPod(['worker']);
    await eventually(
      async () =>
        executionsOf(await historyOf(cluster.client, id), 'A').length > 0 ? true : undefined,
      "the second delivery's result recorded",
      20_000,
    );

    releaseFirst.resolve();
    const view = await cluster.client.wait(id, { timeoutMs: 30_000 });
    expect(view.session.state).toBe('COMPLETED');
    expect(statuses).toEqual(['FENCED']);
    const history = await historyOf(cluster.client, id);
    expect(executionsOf(history, 'A').map((e) => e.result.output.slice(0, 10))).toEqual([
      'delivery 2',
    ]);
    // It handed nothing on: the coordinator had no verdict on its result to refuse.
    const refused = decisions(history, 'event:ignored').filter((d) =>
      d.reason.includes('superseded delivery'),
    );
    expect(refused).toEqual([]);
    // Neither the refused delivery's result nor the judged one's is left in the store.
    expect(await pod.store.redis.hlen(pod.store.keys(id).results)).toBe(0);
  });
});
