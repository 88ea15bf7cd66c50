import { resolve } from 'node:path';
import type { ChildProcess } from 'node:child_process';
import { afterAll, afterEach, describe, expect, inject, it } from 'vitest';
import type { HistoryEntry } from '../../src/shared/domain/history.js';
import { jobIds } from '../../src/shared/queues.js';
import type { SubmitRequest } from '../../src/producers/client.js';
import { FAULT_CRASH_AFTER_APPLY } from '../../src/workers/coordinator/fault-injection.js';
import { root, spawnOrq } from '../support/cli.js';
import { ALL_ROLES, startCluster, type TestCluster } from '../support/cluster.js';
import { bullQueue, exited, FAST_LOCKS, Pods, queueEnv } from '../support/pods.js';
import {
  decisions,
  eventually,
  executionsOf,
  historyOf,
  recordingModels,
  scenarioDir,
  type RecordedCalls,
} from '../support/scenarios.js';

const diamond = resolve(root, 'examples/scenarios/diamond.yaml');

let cluster: TestCluster | undefined;
let pods: Pods | undefined;
const scenarios = scenarioDir();
afterEach(async () => {
  await pods?.stopAll();
  pods = undefined;
  await cluster?.close();
  cluster = undefined;
});
afterAll(() => scenarios.cleanup());

type StateChange = Extract<HistoryEntry, { type: 'state_change' }>;
const movesTo = (h: HistoryEntry[], taskId: string, to: string) =>
  h.filter(
    (e): e is StateChange =>
      e.type === 'state_change' && e.entity === 'task' && e.taskId === taskId && e.to === to,
  );
const judgementsOf = (h: HistoryEntry[], taskId: string) =>
  h.filter((e) => e.type === 'judgement' && e.subject === 'task' && e.taskId === taskId);

/** Per task: how often it was executed, judged and finished, from the session history. */
function effects(h: HistoryEntry[], taskIds: string[]) {
  return Object.fromEntries(
    taskIds.map((id) => [
      id,
      {
        executions: executionsOf(h, id).map((e) => e.attempt),
        judgements: judgementsOf(h, id).length,
        done: movesTo(h, id, 'DONE').length,
      },
    ]),
  );
}

/** Per task: the attempts the models executed and how often they judged it. */
function modelCalls(calls: RecordedCalls, taskIds: string[]) {
  return Object.fromEntries(
    taskIds.map((id) => [
      id,
      {
        executed: calls.execute.filter((r) => r.task.id === id).map((r) => r.attempt),
        judged: calls.judgeTask.filter((r) => r.task.id === id).length,
      },
    ]),
  );
}

/**
 * Planner, judge and coordinator in this process (counting the judge's calls); one worker
 * process of its own, whose every model call sleeps 60 s, so a kill surely lands inside the
 * first execution; its short lock makes the killed worker's job stall quickly. Submits
 * `request` and gives the work queue to watch.
 */
async function withDoomedWorker(scenario: string, request: SubmitRequest) {
  const { models, calls } = recordingModels(scenario);
  cluster = await startCluster({ roles: ['planner', 'judge', 'replanner', 'coordinator'], models });
  const { client } = cluster;
  const workers = new Pods({
    REDIS_URL: inject('redisUrl'),
    ORQ_PREFIX: cluster.prefix,
    ...queueEnv(FAST_LOCKS),
  });
  pods = workers;
  const doomed = await workers.start('worker', ['--latency', '60000', '--concurrency', '1']);
  const { id } = await client.submit(request);
  const work = bullQueue(client.store.redis, cluster.prefix, 'work');
  return { calls, client, doomed, id, work, workers };
}

describe('kill -9 of a worker process in the middle of a task', () => {
  it('redelivers the task after its lock expires; it completes once, judged and applied once', async () => {
    const { calls, client, doomed, id, work, workers } = await withDoomedWorker(diamond, {
      instruction: 'diamond',
      config: { llm: { scenario: diamond } },
    });
    try {
      const active = await eventually(
        async () => {
          const [job] = await work.getActive();
          return job ?? undefined;
        },
        "A's job to be active in the worker",
        20_000,
      );
      expect(active.id).toBe(jobIds.execute(id, 'A', 1));
      doomed.kill('SIGKILL');
      expect(await exited(doomed)).toBe('SIGKILL');
      // Mid-task: A is RUNNING and nothing of its execution has been recorded.
      expect((await client.store.loadTask(id, 'A'))?.task).toMatchObject({
        state: 'RUNNING',
        attempts: 1,
      });
      expect(executionsOf(await historyOf(client, id), 'A')).toEqual([]);

      await workers.start('worker');
      const view = await client.wait(id, { timeoutMs: 40_000 });
      expect(view.session.state).toBe('COMPLETED');
      // The same job (same id, same attempt of A) ran again after its lock expired.
      const redelivered = await work.getJob(jobIds.execute(id, 'A', 1));
      expect(redelivered?.stalledCounter).toBeGreaterThanOrEqual(1);
      expect(await redelivered?.getState()).toBe('completed');

      const h = await historyOf(client, id);
      const once = { executions: [1], judgements: 1, done: 1 };
      expect(effects(h, ['A', 'B', 'C', 'D'])).toEqual({ A: once, B: once, C: once, D: once });
      // The judge (in this process) saw each task once: the killed attempt reached it only once.
      expect(calls.judgeTask.map((r) => r.task.id).sort()).toEqual(['A', 'B', 'C', 'D']);
      expect(decisions(h, 'task:done')).toHaveLength(4);
      expect(view.tasks.map((t) => [t.id, t.state, t.attempts])).toEqual([
        ['A', 'DONE', 1],
        ['B', 'DONE', 1],
        ['C', 'DONE', 1],
        ['D', 'DONE', 1],
      ]);
    } finally {
      await work.close();
    }
  }, 90_000);
});

describe('kill -9 of coordinators between their state write and their next enqueue', () => {
  /** A → B (continued once), A → C (replanned into C-a → C-b), B and C → D. */
  const scenario = scenarios.write('crash-course', {
    plans: [
      {
        tasks: [
          { id: 'A', title: 'Schema', acceptance: 'fields listed', context: 'c' },
          {
            id: 'B',
            title: 'Indexer',
            acceptance: 'all indexed',
            context: 'c',
            dependencies: ['A'],
          },
          {
            id: 'C',
            title: 'API',
            acceptance: 'ranked results',
            context: 'c',
            dependencies: ['A'],
          },
          { id: 'D', title: 'E2E', acceptance: 'found', context: 'c', dependencies: ['B', 'C'] },
        ],
      },
    ],
    planJudgements: [
      { score: 60, isAcceptable: false, issues: ['too vague'], suggestions: ['name the API'] },
      { score: 90, isAcceptable: true },
    ],
    tasks: {
      B: {
        judgements: [
          { success: false, shouldContinue: true, reason: 'half of the products are missing' },
          { success: true, reason: 'all indexed' },
        ],
      },
      C: {
        judgements: [{ success: false, shouldReplan: true, reason: 'ranking undefined' }],
        replan: {
          reason: 'define ranking first',
          tasks: [
            { id: 'C-a', title: 'Ranking rules', acceptance: 'rules written', context: 'c' },
            {
              id: 'C-b',
              title: 'API',
              acceptance: 'ranked results',
              context: 'c',
              dependencies: ['C-a'],
            },
          ],
        },
      },
    },
  });
  // The replanner's subtasks get ids from the original's (replaceTaskWithSubtasks).
  const TASKS = ['A', 'B', 'C', 'C.r1.1', 'C.r1.2', 'D'];

  /** What must not depend on crashes: final states and per-task counts. */
  async function outcome(c: TestCluster, id: string, calls: RecordedCalls) {
    const view = await c.client.wait(id, { timeoutMs: 90_000, until: 'finished' });
    const h = await historyOf(c.client, id);
    return {
      state: view.session.state,
      tasks: view.tasks.map((t) => [t.id, t.state, t.attempts, t.dependencies]),
      perTask: effects(h, TASKS),
      modelCalls: modelCalls(calls, TASKS),
      plans: h.filter((e) => e.type === 'plan').length,
      decisions: h
        .filter((e): e is Extract<HistoryEntry, { type: 'decision' }> => e.type === 'decision')
        .map((d) => `${d.taskId ?? ''}:${d.decision}`)
        .filter((d) => !d.endsWith('event:ignored'))
        .sort(),
      sessionStates: h
        .filter((e) => e.type === 'state_change' && e.entity === 'session')
        .map((e) => (e as StateChange).to),
    };
  }

  it('completes with every task run exactly as often as in a fault-free run', async () => {
    const reference = recordingModels(scenario);
    cluster = await startCluster({ models: reference.models, roles: ALL_ROLES });
    const first = await cluster.client.submit({ instruction: 'search feature' });
    const expected = await outcome(cluster, first.id, reference.calls);
    await cluster.close();
    expect(expected.state).toBe('COMPLETED');
    expect(expected.perTask.B?.executions).toEqual([1, 2]);
    expect(expected.perTask['C.r1.2']?.executions).toEqual([1]);
    expect(expected.modelCalls.B).toEqual({ executed: [1, 2], judged: 2 });

    // Same scenario; the coordinators are processes that SIGKILL themselves right after their
    // n-th state write (n random in 1..3), before flushing the outbox. A supervisor restarts them.
    const faulty = recordingModels(scenario);
    cluster = await startCluster({
      models: faulty.models,
      roles: ['planner', 'judge', 'worker', 'replanner'],
    });
    const env = {
      REDIS_URL: inject('redisUrl'),
      ORQ_PREFIX: cluster.prefix,
      ORQ_LOG_LEVEL: 'warn',
      ...queueEnv(FAST_LOCKS),
    };
    const crashes: (number | string)[] = [];
    let running: ChildProcess | undefined;
    let supervising = true;
    const supervisor = (async () => {
      while (supervising) {
        const n = 1 + Math.floor(Math.random() * 3);
        running = spawnOrq(['start', '--roles', 'coordinator', '--concurrency', '1'], {
          env: { ...env, [FAULT_CRASH_AFTER_APPLY]: String(n) },
        });
        running.stdout?.resume();
        running.stderr?.resume();
        const how = await exited(running);
        if (supervising) crashes.push(how);
      }
    })();
    try {
      const { id } = await cluster.client.submit({ instruction: 'search feature' });
      const actual = await outcome(cluster, id, faulty.calls);
      expect(actual).toEqual(expected);
      // The faults did happen, and every death was the injected SIGKILL.
      expect(crashes.length).toBeGreaterThanOrEqual(3);
      expect(new Set(crashes)).toEqual(new Set(['SIGKILL']));
      expect(await cluster.client.store.readOutbox(id)).toEqual([]);
    } finally {
      supervising = false;
      running?.kill('SIGKILL');
      await supervisor;
    }
  }, 150_000);
});

describe('kill -9 of a worker holding one of its session’s slots', () => {
  it('gives the slot back by redelivery: the waiting task runs after, every task once', async () => {
    // X and Y are independent, but the session has one slot: Y waits in the ready set while the
    // killed worker holds X's.
    const scenario = scenarios.write('one-slot', {
      plans: [
        {
          tasks: [
            { id: 'X', title: 'X', acceptance: 'x', context: 'c' },
            { id: 'Y', title: 'Y', acceptance: 'y', context: 'c' },
          ],
        },
      ],
      planJudgements: [{ score: 90, isAcceptable: true }],
    });
    const { calls, client, doomed, id, work, workers } = await withDoomedWorker(scenario, {
      instruction: 'one slot',
      config: { llm: { scenario }, scheduling: { maxTasksInFlight: 1 } },
    });
    try {
      await eventually(
        async () => ((await work.getActive()).length > 0 ? true : undefined),
        "X's job to be active in the worker",
        20_000,
      );
      doomed.kill('SIGKILL');
      expect(await exited(doomed)).toBe('SIGKILL');
      const held = await client.get(id);
      expect(held.tasks.map((t) => [t.id, t.state])).toEqual([
        ['X', 'RUNNING'],
        ['Y', 'READY'],
      ]);

      await workers.start('worker');
      const view = await client.wait(id, { timeoutMs: 40_000 });
      expect(view.session.state).toBe('COMPLETED');
      const h = await historyOf(client, id);
      const once = { executions: [1], judgements: 1, done: 1 };
      expect(effects(h, ['X', 'Y'])).toEqual({ X: once, Y: once });
      // Y was dispatched only once X was done: the one slot was never shared.
      const doneX = h.findIndex(
        (e) => e.type === 'state_change' && e.taskId === 'X' && e.to === 'DONE',
      );
      expect(movesTo(h, 'Y', 'RUNNING')).toHaveLength(1);
      expect(h.indexOf(movesTo(h, 'Y', 'RUNNING')[0] as HistoryEntry)).toBeGreaterThan(doneX);
      // The judge (in this process) saw each task once.
      expect(calls.judgeTask.map((r) => r.task.id).sort()).toEqual(['X', 'Y']);
    } finally {
      await work.close();
    }
  }, 90_000);
});
