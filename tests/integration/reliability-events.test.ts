import type { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { afterAll, describe, expect, inject, it } from 'vitest';
import { CommandTally } from '../../bench/lib/command-counter.js';
import type { HistoryEntry } from '../../src/shared/domain/history.js';
import type { TaskJudgement } from '../../src/shared/domain/task.js';
import type { ScenarioInput } from '../../src/shared/config/scenario.js';
import type { RoleModels } from '../../src/workers/llm/types.js';
import { silentLogger } from '../../src/shared/logger.js';
import {
  bullPrefix,
  jobIds,
  type QueueName,
  type TaskJudgedEvent,
  type TaskReplannedEvent,
} from '../../src/shared/queues.js';
import { applyEvent } from '../../src/workers/coordinator/coordinator.js';
import { onTaskJudged } from '../../src/workers/coordinator/task-judged.js';
import { SessionStore } from '../../src/shared/store/session-store.js';
import type { RunningRoles } from '../../src/workers/registry.js';
import { clusterPerTest, type TestCluster } from '../support/cluster.js';
import { bullQueue } from '../support/pods.js';
import {
  A_THEN_B,
  decisions,
  deferred,
  eventually,
  exampleScenario,
  executionsOf,
  historyOf,
  recordingModels,
  scenarioDir,
  type Deferred,
} from '../support/scenarios.js';

let cluster: TestCluster | undefined;
const startCluster = clusterPerTest();
const scenarios = scenarioDir();
afterAll(() => scenarios.cleanup());

const TIMEOUT = 15_000;

/** A gate per key: `arrived(k)` resolves when a call reaches it, `release(k)` lets it go on. */
function gates() {
  const arrived = new Map<string, Deferred>();
  const released = new Map<string, Deferred>();
  let open = false;
  const at = (map: Map<string, Deferred>, key: string) => {
    if (!map.has(key)) map.set(key, deferred());
    return map.get(key) as Deferred;
  };
  return {
    async pass(key: string) {
      at(arrived, key).resolve();
      if (!open) await at(released, key).promise;
    },
    arrived: (key: string) => at(arrived, key).promise,
    release: (key: string) => at(released, key).resolve(),
    releaseAll() {
      open = true;
      for (const gate of released.values()) gate.resolve();
    },
  };
}

/** The builtin models of `scenario` with every task judgement and replan held at a gate. */
function heldModels(scenario: string | ScenarioInput) {
  const judge = gates();
  const replan = gates();
  const { models, calls } = recordingModels(scenario, {
    beforeJudgeTask: (r) => judge.pass(`${r.task.id}#${r.attempt}`),
  });
  return {
    models: {
      ...models,
      label: models.label,
      replan: async (r: Parameters<typeof models.replan>[0]) => {
        await replan.pass(r.task.id);
        return models.replan(r);
      },
    },
    calls,
    judge,
    replan,
    releaseAll() {
      judge.releaseAll();
      replan.releaseAll();
    },
  };
}

const ctxOf = (pod: RunningRoles) => ({
  store: pod.store,
  queues: pod.queues,
  logger: silentLogger,
});

/** Starts this test's cluster of two pods on `held`'s models: its client, each coordinator. */
async function twoPods(held: { models: RoleModels }) {
  const started = await startCluster({ models: held.models, pods: 2 });
  cluster = started;
  const [one, two] = started.pods.map(ctxOf);
  if (!one || !two) throw new Error('expected two pods');
  return { client: started.client, one, two };
}

const ok = (reason: string): TaskJudgement => ({
  success: true,
  shouldContinue: false,
  shouldReplan: false,
  reason,
  missingRequirements: [],
});

/** A verdict event on `attempt` of `taskId`, carrying the result the worker really produced. */
function judged(
  held: ReturnType<typeof heldModels>,
  sessionId: string,
  taskId: string,
  attempt: number,
  judgement: TaskJudgement,
): TaskJudgedEvent {
  const call = held.calls.judgeTask.find((r) => r.task.id === taskId && r.attempt === attempt);
  if (!call) throw new Error(`no judge call for ${taskId}#${attempt}`);
  return { sessionId, taskId, attempt, result: call.result, judgement };
}

type StateChange = Extract<HistoryEntry, { type: 'state_change' }>;
const stateChanges = (h: HistoryEntry[], entity: 'task' | 'session') =>
  h.filter((e): e is StateChange => e.type === 'state_change' && e.entity === entity);

const oneTask = exampleScenario('continue-then-done.yaml');
const chain = scenarios.write('chain', A_THEN_B);

describe('the same event delivered to two coordinators at once', () => {
  it('applies a judgement once when two coordinators get it under the same id', async () => {
    const held = heldModels(oneTask);
    const { client, one, two } = await twoPods(held);
    const { id } = await client.submit({ instruction: 'Write the README' });
    try {
      await held.judge.arrived('t1#1');
      const event = judged(held, id, 't1', 1, {
        ...ok('partial'),
        success: false,
        shouldContinue: true,
        reason: 'usage is missing',
      });
      const eventId = jobIds.taskJudged(id, 't1', 1);
      const outcomes = await Promise.all([
        applyEvent(one, 'task-judged', event, eventId),
        applyEvent(two, 'task-judged', event, eventId),
      ]);
      const statuses = outcomes.map((o) => o.status).sort();
      expect(statuses.filter((s) => s === 'OK')).toHaveLength(1);
      expect(statuses.filter((s) => s !== 'OK')).toEqual([
        expect.stringMatching(/^(DUPLICATE|IGNORED)$/),
      ]);
      expect((await client.store.loadTask(id, 't1'))?.task).toMatchObject({
        state: 'NEEDS_CONTINUATION',
        attempts: 2,
        continuations: 1,
      });
    } finally {
      held.releaseAll();
    }
    const view = await client.wait(id, { timeoutMs: TIMEOUT });
    expect(view.session.state).toBe('COMPLETED');
    const h = await historyOf(client, id);
    expect(executionsOf(h, 't1').map((e) => e.attempt)).toEqual([1, 2]);
    expect(decisions(h, 'task:continue')).toHaveLength(1);
    expect(decisions(h, 'task:done')).toHaveLength(1);
    expect(held.calls.execute.map((r) => r.attempt)).toEqual([1, 2]);
  });

  it('applies one of two different deliveries of one verdict and ignores the other', async () => {
    const held = heldModels(oneTask);
    const { client, one, two } = await twoPods(held);
    const { id } = await client.submit({ instruction: 'Write the README' });
    try {
      await held.judge.arrived('t1#1');
      const event = judged(held, id, 't1', 1, ok('all there'));
      // Two event ids for one verdict: the compare-and-swap on the task lets one through.
      const outcomes = await Promise.all([
        applyEvent(one, 'task-judged', event, 'delivery-one'),
        applyEvent(two, 'task-judged', event, 'delivery-two'),
      ]);
      expect(outcomes.map((o) => o.status).sort()).toEqual(['IGNORED', 'OK']);
      // Stale for the task, or (when the winner already completed the session) for the session.
      expect(outcomes.find((o) => o.status === 'IGNORED')?.reason).toMatch(
        /stale judgement for attempt 1|session is COMPLETED/,
      );
    } finally {
      held.releaseAll();
    }
    const view = await client.wait(id, { timeoutMs: TIMEOUT });
    expect(view.session.state).toBe('COMPLETED');
    expect(view.tasks[0]).toMatchObject({ state: 'DONE', attempts: 1 });
    const h = await historyOf(client, id);
    expect(executionsOf(h, 't1')).toHaveLength(1);
    expect(stateChanges(h, 'task').filter((e) => e.to === 'DONE')).toHaveLength(1);
    expect(stateChanges(h, 'session').filter((e) => e.to === 'COMPLETED')).toHaveLength(1);
  });

  it('replaces a task once when its replan is delivered twice, concurrently and again later', async () => {
    const held = heldModels(exampleScenario('replan-task.yaml'));
    const { client, one, two } = await twoPods(held);
    const { id } = await client.submit({ instruction: 'Login with validation' });
    held.judge.releaseAll();
    try {
      await held.replan.arrived('t2');
      const event: TaskReplannedEvent = {
        sessionId: id,
        taskId: 't2',
        attempt: 1,
        breakdown: {
          reason: 'define the rules first',
          tasks: [
            {
              id: 'rules',
              title: 'Write the rules',
              acceptance: 'rules',
              context: 'c',
              scopePaths: [],
              dependencies: [],
            },
            {
              id: 'impl',
              title: 'Validate the login input',
              acceptance: 'messages per field',
              context: 'c',
              scopePaths: [],
              dependencies: ['rules'],
            },
          ],
        },
      };
      const eventId = jobIds.taskReplanned(id, 't2', 1);
      const concurrent = await Promise.all([
        applyEvent(one, 'task-replanned', event, eventId),
        applyEvent(two, 'task-replanned', event, eventId),
      ]);
      expect(concurrent.map((o) => o.status).filter((s) => s === 'OK')).toHaveLength(1);
      // Later, under another id (a replan job that ran twice): stale, since t2 is replaced.
      const late = await applyEvent(one, 'task-replanned', event, 'late-replan');
      expect(late).toMatchObject({ status: 'IGNORED', reason: expect.stringContaining('stale') });
    } finally {
      held.releaseAll();
    }
    // The real Replanner's event comes under the same id as ours: a duplicate.
    const view = await client.wait(id, { timeoutMs: TIMEOUT });
    expect(view.session.state).toBe('COMPLETED');
    expect(view.session.taskIds).toEqual(['t1', 't2', 't2.r1.1', 't2.r1.2']);
    expect(view.tasks.map((t) => [t.id, t.state])).toEqual([
      ['t1', 'DONE'],
      ['t2', 'REPLACED_BY_REPLAN'],
      ['t2.r1.1', 'DONE'],
      ['t2.r1.2', 'DONE'],
    ]);
    const h = await historyOf(client, id);
    expect(decisions(h, 'replan:applied')).toHaveLength(1);
    expect(h.filter((e) => e.type === 'plan' && e.source === 'replanner')).toHaveLength(1);
    for (const task of ['t2.r1.1', 't2.r1.2']) expect(executionsOf(h, task)).toHaveLength(1);
  });
});

describe('late and out-of-order judgements', () => {
  it('ignores verdicts for an older or a future attempt once a continued task is done', async () => {
    const held = heldModels(oneTask);
    cluster = await startCluster({ models: held.models });
    const ctx = ctxOf(cluster.pods[0]!);
    const { client } = cluster;
    const { id } = await client.submit({ instruction: 'Write the README' });
    held.releaseAll();
    const view = await client.wait(id, { timeoutMs: TIMEOUT });
    expect(view.tasks[0]).toMatchObject({ state: 'DONE', attempts: 2 });
    const before = await historyOf(client, id);
    const replanIt = { ...ok('x'), success: false, shouldReplan: true, reason: 'split it' };

    const older = await applyEvent(
      ctx,
      'task-judged',
      judged(held, id, 't1', 1, replanIt),
      'late-attempt-1',
    );
    const future = await applyEvent(
      ctx,
      'task-judged',
      { ...judged(held, id, 't1', 2, replanIt), attempt: 3 },
      'future-attempt-3',
    );
    expect(older).toMatchObject({
      status: 'IGNORED',
      reason: expect.stringContaining('COMPLETED'),
    });
    expect(future.status).toBe('IGNORED');
    const after = await client.get(id);
    expect(after.tasks).toEqual(view.tasks);
    expect(after.session.state).toBe('COMPLETED');
    const h = await historyOf(client, id);
    // Two "ignored" notes and nothing else; no replan job was queued.
    expect(h.slice(before.length).map((e) => e.type === 'decision' && e.decision)).toEqual([
      'event:ignored',
      'event:ignored',
    ]);
    const replans = bullQueue(client.store.redis, cluster.prefix, 'replan');
    expect(await replans.getJobCounts()).toMatchObject({
      waiting: 0,
      prioritized: 0,
      active: 0,
      completed: 0,
    });
    await replans.close();
  });

  it('a verdict for an older attempt that arrives while the next one runs changes nothing', async () => {
    const held = heldModels(oneTask);
    cluster = await startCluster({ models: held.models });
    const ctx = ctxOf(cluster.pods[0]!);
    const { client } = cluster;
    const { id } = await client.submit({ instruction: 'Write the README' });
    try {
      held.judge.release('t1#1');
      await held.judge.arrived('t1#2');
      const task = await client.store.loadTask(id, 't1');
      expect(task?.task).toMatchObject({ state: 'NEEDS_CONTINUATION', attempts: 2 });
      const late = await applyEvent(
        ctx,
        'task-judged',
        judged(held, id, 't1', 1, ok('late success')),
        'late-success-for-1',
      );
      expect(late).toMatchObject({ status: 'IGNORED', reason: expect.stringContaining('stale') });
      expect(await client.store.loadTask(id, 't1')).toEqual(task);
    } finally {
      held.releaseAll();
    }
    const view = await client.wait(id, { timeoutMs: TIMEOUT });
    expect(view.session.state).toBe('COMPLETED');
    expect(decisions(await historyOf(client, id), 'task:done')).toHaveLength(1);
  });
});

/**
 * A coordinator of another process on the cluster's Redis: a store (and so copies of the tasks
 * it writes) of its own, the pod's queues. `close` when done.
 */
function otherCoordinator(of: TestCluster) {
  const connection = new Redis(inject('redisUrl'));
  const store = new SessionStore(connection, of.prefix);
  const pod = of.pods[0];
  if (!pod) throw new Error('expected a pod');
  return {
    connection,
    ctx: { store, queues: pod.queues, logger: silentLogger },
    close: () => connection.disconnect(),
  };
}

/** `store` writes `taskIds` unchanged (their versions move on), so it holds them as written. */
async function rewrite(store: SessionStore, sessionId: string, taskIds: string[]) {
  const { tasks } = await store.requireForTask(sessionId, taskIds);
  const written = await store.apply(sessionId, {
    eventId: `rewrite|${taskIds.join(',')}|${[...tasks.values()].map((t) => t.version).join(',')}`,
    tasks: [...tasks.values()],
  });
  expect(written.status).toBe('OK');
}

/**
 * A session of `scenario` on held models, with a coordinator of another process beside the
 * pod's: runs `steps` (which release the gates they need), then lets the session finish. It must
 * complete with one task:done decision per task, however the coordinators shared the verdicts.
 */
async function withOtherCoordinator(
  scenario: string,
  tasks: number,
  steps: (s: {
    held: ReturnType<typeof heldModels>;
    client: TestCluster['client'];
    other: ReturnType<typeof otherCoordinator>;
    id: string;
  }) => Promise<void>,
) {
  const held = heldModels(scenario);
  cluster = await startCluster({ models: held.models });
  const { client } = cluster;
  const other = otherCoordinator(cluster);
  const { id } = await client.submit({ instruction: 'Write the README' });
  try {
    await steps({ held, client, other, id });
  } finally {
    held.releaseAll();
    other.close();
  }
  const view = await client.wait(id, { timeoutMs: TIMEOUT });
  expect(view.session.state).toBe('COMPLETED');
  expect(decisions(await historyOf(client, id), 'task:done')).toHaveLength(tasks);
}

/** The verdict "done" on `attempt` of `taskId`, applied by the other coordinator: OK. */
async function doneViaOther(
  held: ReturnType<typeof heldModels>,
  other: ReturnType<typeof otherCoordinator>,
  id: string,
  taskId: string,
  attempt: number,
) {
  const verdict = await applyEvent(
    other.ctx,
    'task-judged',
    judged(held, id, taskId, attempt, ok(`done on attempt ${attempt}`)),
    `${taskId}#${attempt}-via-other`,
  );
  expect(verdict.status).toBe('OK');
}

describe("a coordinator's own copy of a task", () => {
  it('decides a verdict from it, reading no task back', async () => {
    await withOtherCoordinator(chain, 2, async ({ held, client, other, id }) => {
      await held.judge.arrived('A#1');
      await rewrite(other.ctx.store, id, ['A', 'B']);
      const tally = new CommandTally();
      tally.attach(other.connection);
      tally.take();
      await doneViaOther(held, other, id, 'A', 1);
      expect(tally.take()['script:orqReadTasks']).toBeUndefined();
      // B was released from the copy too: dispatched, at its next version.
      expect(await client.store.loadTask(id, 'B')).toMatchObject({
        task: { state: 'RUNNING', attempts: 1 },
        version: 3,
      });
    });
  });

  it('is checked against a fresh read before a verdict is ignored as stale', async () => {
    await withOtherCoordinator(oneTask, 1, async ({ held, client, other, id }) => {
      await held.judge.arrived('t1#1');
      await rewrite(other.ctx.store, id, ['t1']);
      // The pod's coordinator continues t1: attempt 2, which the other's copy has not seen.
      held.judge.release('t1#1');
      await held.judge.arrived('t1#2');
      expect(other.ctx.store.writtenTasks(id, ['t1'])?.tasks.get('t1')?.task.attempts).toBe(1);
      await doneViaOther(held, other, id, 't1', 2);
      expect((await client.store.loadTask(id, 't1'))?.task).toMatchObject({
        state: 'DONE',
        attempts: 2,
      });
    });
  });

  it('that another process wrote over since is dropped, and the verdict applied from a read', async () => {
    await withOtherCoordinator(oneTask, 1, async ({ held, client, other, id }) => {
      held.judge.release('t1#1');
      await held.judge.arrived('t1#2');
      await rewrite(other.ctx.store, id, ['t1']);
      // Another writer moves t1's version on: the other's copy is now one version behind.
      await rewrite(client.store, id, ['t1']);
      await doneViaOther(held, other, id, 't1', 2);
      expect((await client.store.loadTask(id, 't1'))?.task.state).toBe('DONE');
    });
  });
});

describe('cancel racing a task completion', () => {
  const orders = ['judgement first', 'cancel first', 'at once'] as const;
  it.each(orders)(
    'ends CANCELLED with every count at zero and nothing after it (%s)',
    async (order) => {
      const held = heldModels(chain);
      const { client, one, two } = await twoPods(held);
      const { id } = await client.submit({ instruction: 'A then B' });
      try {
        await held.judge.arrived('A#1');
        const done = () =>
          applyEvent(
            one,
            'task-judged',
            judged(held, id, 'A', 1, ok('fine')),
            jobIds.taskJudged(id, 'A', 1),
          );
        const cancel = () =>
          applyEvent(
            two,
            'cancel',
            { sessionId: id, reason: 'changed my mind' },
            jobIds.cancel(id, 'r1'),
          );
        if (order === 'judgement first') {
          await done();
          await cancel();
        } else if (order === 'cancel first') {
          await cancel();
          expect((await done()).status).toBe('IGNORED');
        } else {
          await Promise.all([done(), cancel()]);
        }
      } finally {
        held.releaseAll();
      }
      // Let whatever was queued (B's job, the real judge's event) run out.
      await eventually(async () => {
        const counts = await Promise.all(
          cluster!.pods[0]!.queues.all().map((q) =>
            q.getJobCounts('waiting', 'prioritized', 'active', 'delayed'),
          ),
        );
        return counts.every((c) => Object.values(c).every((n) => n === 0)) ? true : undefined;
      }, 'the queues to drain');

      const view = await client.get(id);
      expect(view.session.state).toBe('CANCELLED');
      expect(view.counters).toEqual({ open: 0, active: 0 });
      expect(view.tasks.every((t) => t.state === 'DONE' || t.state === 'CANCELLED')).toBe(true);
      const h = await historyOf(client, id);
      const cancelledAt = h.findIndex(
        (e) => e.type === 'state_change' && e.entity === 'session' && e.to === 'CANCELLED',
      );
      expect(stateChanges(h, 'session').map((e) => e.to)).toEqual([
        'PLANNING',
        'RUNNING',
        'CANCELLED',
      ]);
      // After the cancel, no task moved but to CANCELLED, and nothing ran.
      const after = h.slice(cancelledAt + 1);
      expect(after.filter((e) => e.type === 'execution')).toEqual([]);
      expect(after.filter((e) => e.type === 'state_change' && e.to !== 'CANCELLED')).toEqual([]);
      expect(executionsOf(h, 'B')).toEqual([]);
    },
  );
});

describe('a coordinator that died between its state write and the rest of the event', () => {
  it('the redelivered event enqueues what the write queued and completes the session', async () => {
    const held = heldModels(chain);
    cluster = await startCluster({ models: held.models });
    const ctx = ctxOf(cluster.pods[0]!);
    const { client, pods } = cluster;
    const { id } = await client.submit({ instruction: 'A then B' });
    /** The state write of applyEvent alone: what a coordinator killed right after it left. */
    const writeOnly = async (event: TaskJudgedEvent, eventId: string) => {
      const transition = await onTaskJudged(ctx, event, eventId);
      if (!('changeset' in transition)) throw new Error('expected a transition');
      expect((await pods[0]!.store.apply(id, transition.changeset)).status).toBe('OK');
    };
    try {
      await held.judge.arrived('A#1');
      const aDone = jobIds.taskJudged(id, 'A', 1);
      await writeOnly(judged(held, id, 'A', 1, ok('fine')), aDone);
      // B is RUNNING, but its job sits in the outbox: nobody would run it without a redelivery.
      expect((await client.store.readOutbox(id)).map((j) => j.jobId)).toEqual([
        jobIds.execute(id, 'B', 1),
      ]);
      const redelivered = await applyEvent(
        ctx,
        'task-judged',
        judged(held, id, 'A', 1, ok('fine')),
        aDone,
      );
      expect(redelivered.status).toBe('IGNORED');
      expect(await client.store.readOutbox(id)).toEqual([]);

      await held.judge.arrived('B#1');
      const bDone = jobIds.taskJudged(id, 'B', 1);
      await writeOnly(judged(held, id, 'B', 1, ok('fine')), bDone);
      // Every task is done, yet the session was not finalized before the "crash".
      expect((await client.get(id)).session.state).toBe('RUNNING');
      await applyEvent(ctx, 'task-judged', judged(held, id, 'B', 1, ok('fine')), bDone);
      expect((await client.get(id)).session.state).toBe('COMPLETED');
    } finally {
      held.releaseAll();
    }
    const h = await historyOf(client, id);
    expect(stateChanges(h, 'session').map((e) => e.to)).toEqual([
      'PLANNING',
      'RUNNING',
      'COMPLETED',
    ]);
    for (const task of ['A', 'B']) expect(executionsOf(h, task)).toHaveLength(1);
  });
});

describe('a job BullMQ fails itself after it stalled too often', () => {
  /**
   * What BullMQ's stalled check writes once a job's processes died more than maxStalledCount
   * times: the next consumer to take it fails it without running the processor.
   */
  const markStalledTooOften = (target: TestCluster, queue: QueueName, jobId: string) =>
    target.client.store.redis.hset(
      `${bullPrefix(target.prefix)}:${queue}:${jobId}`,
      'defa',
      'job stalled more than allowable limit',
    );

  /** A (of A then B) is blocked with `role`'s reason, and a resume runs it again to the end. */
  async function expectBlockedThenResumed(
    target: TestCluster,
    id: string,
    failed: { role: string; queue: Queue; jobId: string },
  ) {
    const { client } = target;
    const view = await client.wait(id, { timeoutMs: TIMEOUT });
    expect(view.session.state).toBe('BLOCKED');
    expect(view.tasks.map((t) => [t.id, t.state])).toEqual([
      ['A', 'BLOCKED'],
      ['B', 'READY'],
    ]);
    expect(await (await failed.queue.getJob(failed.jobId))?.getState()).toBe('failed');
    expect((await historyOf(client, id)).filter((e) => e.type === 'error')).toEqual([
      expect.objectContaining({
        role: failed.role,
        taskId: 'A',
        attempt: 1,
        message: 'job stalled more than allowable limit',
      }),
    ]);
    await client.resume(id, { mode: 'retry' });
    const resumed = await client.wait(id, { timeoutMs: TIMEOUT, until: 'finished' });
    expect(resumed.session.state).toBe('COMPLETED');
    expect(executionsOf(await historyOf(client, id), 'A').map((e) => e.attempt)).toEqual([2]);
  }

  /** A session of A then B whose plan is accepted while no worker runs: A's job waits. */
  async function sessionWaitingForWorkers() {
    const target = await startCluster({ roles: ['planner', 'judge', 'replanner', 'coordinator'] });
    cluster = target;
    const { id } = await target.client.submit({
      instruction: 'A then B',
      config: { llm: { scenario: chain } },
    });
    const work = bullQueue(target.client.store.redis, target.prefix, 'work');
    const workId = jobIds.execute(id, 'A', 1);
    await eventually(async () => ((await work.getJob(workId)) ? true : undefined), "A's job");
    return { target, id, work, workId };
  }

  it('blocks its task with the reason in the history, and resume runs it again', async () => {
    const { target, id, work, workId } = await sessionWaitingForWorkers();
    try {
      await markStalledTooOften(target, 'work', workId);
      await target.startPod(['worker']);
      await expectBlockedThenResumed(target, id, { role: 'worker', queue: work, jobId: workId });
    } finally {
      await work.close();
    }
  });

  it("blocks a coordinator verdict's task with the reason, and resume runs it again", async () => {
    const { target, id, work } = await sessionWaitingForWorkers();
    const coordinator = bullQueue(target.client.store.redis, target.prefix, 'coordinator');
    try {
      // Stop every coordinator, then let A run and be judged: its verdict waits in the queue.
      await target.pods.splice(0, 1)[0]?.close(5_000);
      await target.startPod(['worker', 'judge']);
      const eventId = jobIds.taskJudged(id, 'A', 1);
      await eventually(
        async () => ((await coordinator.getJob(eventId)) ? true : undefined),
        "A's verdict",
      );
      await markStalledTooOften(target, 'coordinator', eventId);
      await target.startPod(['coordinator']);
      await expectBlockedThenResumed(target, id, {
        role: 'coordinator',
        queue: coordinator,
        jobId: eventId,
      });
    } finally {
      await work.close();
      await coordinator.close();
    }
  });
});

describe('duplicate and out-of-order verdicts in a session with fewer slots than tasks', () => {
  /** X, Y and Z are independent; the session has one slot (scheduling.maxTasksInFlight). */
  const threeTasks = scenarios.write('three-one-slot', {
    plans: [
      {
        tasks: ['X', 'Y', 'Z'].map((id) => ({ id, title: id, acceptance: id, context: 'c' })),
      },
    ],
    planJudgements: [{ score: 90, isAcceptable: true }],
  });

  it('free the slot once: one waiting task is dispatched, whatever the deliveries', async () => {
    const held = heldModels(threeTasks);
    const { client, one, two } = await twoPods(held);
    const { id } = await client.submit({
      instruction: 'three tasks',
      config: { scheduling: { maxTasksInFlight: 1 } },
    });
    const states = async () =>
      Object.fromEntries((await client.get(id)).tasks.map((t) => [t.id, t.state]));
    try {
      await held.judge.arrived('X#1');
      expect(await states()).toEqual({ X: 'RUNNING', Y: 'READY', Z: 'READY' });
      // A verdict for an attempt X never had (out of order): ignored, and no slot moves.
      const verdict = judged(held, id, 'X', 1, ok('done'));
      const future = await applyEvent(one, 'task-judged', { ...verdict, attempt: 2 }, 'future');
      expect(future.status).toBe('IGNORED');
      expect(await states()).toEqual({ X: 'RUNNING', Y: 'READY', Z: 'READY' });
      // The real verdict, delivered twice under its id and once more under another id.
      const eventId = jobIds.taskJudged(id, 'X', 1);
      const outcomes = await Promise.all([
        applyEvent(one, 'task-judged', verdict, eventId),
        applyEvent(two, 'task-judged', verdict, eventId),
        applyEvent(two, 'task-judged', verdict, 'another-delivery'),
      ]);
      expect(outcomes.filter((o) => o.status === 'OK')).toHaveLength(1);
      // One slot freed, one task took it (Y or Z, equal paths); the other still waits.
      const after = await states();
      expect(after.X).toBe('DONE');
      expect([after.Y, after.Z].sort()).toEqual(['READY', 'RUNNING']);
    } finally {
      held.releaseAll();
    }
    const view = await client.wait(id, { timeoutMs: TIMEOUT });
    expect(view.session.state).toBe('COMPLETED');
    const h = await historyOf(client, id);
    for (const t of ['X', 'Y', 'Z']) expect(executionsOf(h, t).map((e) => e.attempt)).toEqual([1]);
    expect(decisions(h, 'task:done')).toHaveLength(3);
  });
});
