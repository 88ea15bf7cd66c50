import { describe, expect, it } from 'vitest';
import { CommandTally } from '../../bench/lib/command-counter.js';
import { silentLogger } from '../../src/shared/logger.js';
import { jobIds, type TaskJudgedEvent, type UnsettledUsage } from '../../src/shared/queues.js';
import { applyEvent } from '../../src/workers/coordinator/coordinator.js';
import { ALL_ROLES, clusterPerTest } from '../support/cluster.js';
import { bullQueue } from '../support/pods.js';
import { A_THEN_B, deferred, eventually, recordingModels } from '../support/scenarios.js';

const startCluster = clusterPerTest();
const TIMEOUT = 20_000;

const judgeCall = (taskId: string): UnsettledUsage => ({
  role: 'judge',
  taskId,
  inputTokens: 11,
  outputTokens: 3,
  usdMicros: 0,
});

/**
 * Without a budget, a call holds no reservation, so its usage goes on with its result and is
 * counted by the write that receives it (the judge's read, the coordinator's write) instead of
 * a settlement of its own: one round trip less per execution and per verdict.
 */
describe('usage passed on with results', () => {
  it("counts every execution and verdict with the writes that carry them: only the plan's calls settle", async () => {
    const cluster = await startCluster({ pods: 0 });
    const pod = await cluster.startPod(ALL_ROLES);
    const tally = new CommandTally();
    tally.attach(pod.store.redis);
    const { id } = await cluster.client.submit({
      instruction: 'Write the parser and add the tests',
    });
    const view = await cluster.client.wait(id, { timeoutMs: TIMEOUT });
    expect(view.session.state).toBe('COMPLETED');
    expect(view.tasks.length).toBeGreaterThan(1);

    // The plan and its judgement settle; executions and task judgements do not.
    expect(tally.take()['script:orqUsageSettle']).toBe(2);
    expect(view.usage.byRole.planner?.calls).toBe(1);
    expect(view.usage.byRole.worker?.calls).toBe(view.tasks.length);
    expect(view.usage.byRole.judge?.calls).toBe(1 + view.tasks.length);
    for (const task of view.tasks) {
      expect(view.usage.byTask[task.id]?.calls).toBe(2);
      expect(view.usage.byTask[task.id]?.inputTokens).toBeGreaterThan(0);
    }
    const roles = Object.values(view.usage.byRole);
    expect(view.usage.total.calls).toBe(roles.reduce((n, u) => n + u.calls, 0));
    expect(view.usage.total.inputTokens).toBe(roles.reduce((n, u) => n + u.inputTokens, 0));
  });

  it('counts an execution whose judge finds the session stopped, once the judge reads it', async () => {
    const executing = deferred();
    const release = deferred();
    const { models } = recordingModels(A_THEN_B, {
      beforeExecute: async () => {
        executing.resolve();
        await release.promise;
      },
    });
    const cluster = await startCluster({ models, roles: ALL_ROLES.filter((r) => r !== 'judge') });
    const judge = await cluster.startPod(['judge']);
    const { client } = cluster;
    const { id } = await client.submit({ instruction: 'A then B' });
    await executing.promise;
    // No judge while A's verdict is due: its job waits in the queue with A's usage.
    await judge.close(5_000);
    release.resolve();
    const queue = bullQueue(client.store.redis, cluster.prefix, 'judge');
    try {
      await eventually(() => queue.getJob(jobIds.judgeTask(id, 'A', 1)), "A's judge job");
    } finally {
      await queue.close();
    }
    await client.cancel(id);
    expect((await client.wait(id, { timeoutMs: TIMEOUT })).session.state).toBe('CANCELLED');
    // Passed on, so not counted by the worker.
    expect((await client.get(id)).usage.byRole.worker).toBeUndefined();

    await cluster.startPod(['judge']);
    const usage = await eventually(async () => {
      const { usage } = await client.get(id);
      return usage.byRole.worker ? usage : undefined;
    }, "A's execution counted");
    expect(usage.byRole.worker?.calls).toBe(1);
    expect(usage.byTask.A?.calls).toBe(1);
    // The judge made no call: the session had stopped.
    expect(usage.byRole.judge?.calls).toBe(1);
  });

  it("counts what the judge's read carries once, however often the read runs, and not for a deleted session", async () => {
    const cluster = await startCluster();
    const { client } = cluster;
    const store = cluster.pods[0]!.store;
    const { id } = await client.submit({ instruction: 'Write the parser' });
    await client.wait(id, { timeoutMs: TIMEOUT });
    const before = (await client.get(id)).usage;

    const carried = { id: 'usage|test-job', usage: [judgeCall('t1'), judgeCall('t1')] };
    await store.loadForTask(id, ['t1'], carried);
    const read = await store.loadForTask(id, ['t1'], carried);
    expect(read.tasks.get('t1')?.task.state).toBe('DONE');
    const after = (await client.get(id)).usage;
    expect(after.byRole.judge?.calls).toBe((before.byRole.judge?.calls ?? 0) + 2);
    expect(after.byTask.t1?.inputTokens).toBe((before.byTask.t1?.inputTokens ?? 0) + 22);
    expect(after.total.outputTokens).toBe(before.total.outputTokens + 6);

    await client.delete(id);
    const gone = await store.loadForTask(id, ['t1'], {
      id: 'usage|another-job',
      usage: [judgeCall('t1')],
    });
    expect(gone.snapshot).toBeUndefined();
    expect(await client.store.redis.exists(store.keys(id).usage)).toBe(0);
  });

  it('counts the usage an event carries once, also when the event is ignored', async () => {
    const cluster = await startCluster();
    const { client } = cluster;
    const pod = cluster.pods[0]!;
    const ctx = { store: pod.store, queues: pod.queues, logger: silentLogger };
    const { id } = await client.submit({ instruction: 'Write the parser' });
    const done = await client.wait(id, { timeoutMs: TIMEOUT });
    const t1 = done.tasks.find((t) => t.id === 't1');
    const before = (await client.get(id)).usage;

    // A verdict arriving after the session completed: ignored, and its judge call still counted.
    const event: TaskJudgedEvent = {
      sessionId: id,
      taskId: 't1',
      attempt: 1,
      result: t1!.result!,
      judgement: t1!.judgement!,
      unsettledUsage: [judgeCall('t1')],
    };
    const eventId = 'test-late-verdict';
    expect((await applyEvent(ctx, 'task-judged', event, eventId)).status).toBe('IGNORED');
    expect((await applyEvent(ctx, 'task-judged', event, eventId)).status).toBe('IGNORED');
    const after = (await client.get(id)).usage;
    expect(after.byRole.judge?.calls).toBe((before.byRole.judge?.calls ?? 0) + 1);
    expect(after.byTask.t1?.outputTokens).toBe((before.byTask.t1?.outputTokens ?? 0) + 3);
  });
});
