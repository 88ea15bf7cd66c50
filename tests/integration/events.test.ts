import { afterAll, describe, expect, it } from 'vitest';
import { ValidationError } from '../../src/shared/errors.js';
import { createBuiltinModels } from '../../src/workers/llm/builtin.js';
import { silentLogger } from '../../src/shared/logger.js';
import { jobIds, outboxJob, type TaskJudgedEvent } from '../../src/shared/queues.js';
import { makeSession } from '../support/executors.js';
import { applyEvent } from '../../src/workers/coordinator/coordinator.js';
import { clusterPerTest, type TestCluster } from '../support/cluster.js';
import {
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

describe('events delivered twice or late', () => {
  it('applies a task judgement once however often it is delivered, and ignores stale ones', async () => {
    // Every task judgement is held until the test lets it go, so the test can deliver its own.
    const judging = new Map<number, Deferred>();
    const released = new Map<number, Deferred>();
    const gate = (attempt: number, map: Map<number, Deferred>) => {
      if (!map.has(attempt)) map.set(attempt, deferred());
      return map.get(attempt) as Deferred;
    };
    const scenario = exampleScenario('continue-then-done.yaml');
    const { models, calls } = recordingModels(scenario, {
      async beforeJudgeTask(request) {
        gate(request.attempt, judging).resolve();
        await gate(request.attempt, released).promise;
      },
    });
    cluster = await startCluster({ models });
    const { client } = cluster;
    const pod = cluster.pods[0]!;
    const ctx = { store: pod.store, queues: pod.queues, logger: silentLogger };
    const { id } = await client.submit({ instruction: 'Write the README' });
    const releaseAll = () => [1, 2, 3].forEach((a) => gate(a, released).resolve());

    try {
      await gate(1, judging).promise;
      const execution = calls.execute.find((r) => r.attempt === 1);
      expect(execution).toBeDefined();
      const event: TaskJudgedEvent = {
        sessionId: id,
        taskId: 't1',
        attempt: 1,
        result: {
          output: 'partial',
          log: '',
          artifacts: [],
          tokenUsage: { inputTokens: 0, outputTokens: 0 },
          durationMs: 0,
        },
        judgement: {
          success: false,
          shouldContinue: true,
          shouldReplan: false,
          reason: 'Sections are missing',
          missingRequirements: [],
        },
      };
      const eventId = jobIds.taskJudged(id, 't1', 1);

      // The same event twice (a redelivery): the second changes nothing.
      const first = await applyEvent(ctx, 'task-judged', event, eventId);
      const afterFirst = await pod.store.loadTask(id, 't1');
      const historyAfterFirst = await historyOf(client, id);
      const second = await applyEvent(ctx, 'task-judged', event, eventId);
      expect(first.status).toBe('OK');
      expect(second.status).not.toBe('OK');
      expect(afterFirst?.task).toMatchObject({
        state: 'NEEDS_CONTINUATION',
        attempts: 2,
        continuations: 1,
        feedback: 'Sections are missing',
      });
      const afterSecond = await pod.store.loadTask(id, 't1');
      expect(afterSecond).toEqual(afterFirst);
      expect(await historyOf(client, id)).toHaveLength(historyAfterFirst.length);

      // A judgement of attempt 1 under another id arrives while attempt 2 is judged: stale.
      await gate(2, judging).promise;
      const stale = await applyEvent(
        ctx,
        'task-judged',
        { ...event, judgement: { ...event.judgement, success: true } },
        'test-stale-judgement',
      );
      expect(stale.status).toBe('IGNORED');
      expect(stale.reason).toContain('stale judgement for attempt 1');
      expect((await pod.store.loadTask(id, 't1'))?.version).toBe(afterFirst?.version);
      const h = await historyOf(client, id);
      expect(decisions(h, 'event:ignored').map((d) => d.reason)).toEqual([
        expect.stringContaining('stale judgement for attempt 1 of t1'),
      ]);
    } finally {
      releaseAll();
    }

    const view = await client.wait(id, { timeoutMs: TIMEOUT });
    expect(view.session.state).toBe('COMPLETED');
    expect(view.tasks[0]).toMatchObject({ state: 'DONE', attempts: 2, continuations: 1 });
    const h = await historyOf(client, id);
    // The real judge's verdict on attempt 1 came in under the same id as ours: a duplicate.
    expect(executionsOf(h, 't1').map((e) => e.attempt)).toEqual([1, 2]);
    expect(decisions(h, 'task:continue')).toHaveLength(1);
    expect(decisions(h, 'task:done')).toHaveLength(1);
    expect(calls.execute.map((r) => r.attempt)).toEqual([1, 2]);
  });

  it('ignores a plan judgement delivered again after the plan was accepted', async () => {
    cluster = await startCluster();
    const { client } = cluster;
    const pod = cluster.pods[0]!;
    const ctx = { store: pod.store, queues: pod.queues, logger: silentLogger };
    const { id } = await client.submit({
      instruction: 'Run the diamond',
      config: { llm: { scenario: exampleScenario('diamond.yaml') } },
    });
    const view = await client.wait(id, { timeoutMs: TIMEOUT });
    expect(view.session.state).toBe('COMPLETED');
    const plan = (await historyOf(client, id)).find((e) => e.type === 'plan');
    const before = await historyOf(client, id);

    const event = {
      sessionId: id,
      attempt: 0,
      plan: plan?.type === 'plan' ? plan.plan : undefined,
      judgement: { score: 92, isAcceptable: true, issues: [], suggestions: [] },
    };
    // Same id: a duplicate; another id: ignored with a history entry. Tasks are untouched.
    expect((await applyEvent(ctx, 'plan-judged', event, jobIds.planJudged(id, 0))).status).toBe(
      'IGNORED',
    );
    expect(await historyOf(client, id)).toHaveLength(before.length);
    const again = await applyEvent(ctx, 'plan-judged', event, 'test-plan-judged-again');
    expect(again).toMatchObject({
      status: 'IGNORED',
      reason: expect.stringContaining('COMPLETED'),
    });
    const after = await client.get(id);
    expect(after.tasks).toEqual(view.tasks);
    expect(after.session.state).toBe('COMPLETED');
  });

  it('does not start a resume twice when the same resume event is delivered again', async () => {
    cluster = await startCluster();
    const { client } = cluster;
    const pod = cluster.pods[0]!;
    const ctx = { store: pod.store, queues: pod.queues, logger: silentLogger };
    const { id } = await client.submit({
      instruction: 'Deploy',
      config: { llm: { scenario: exampleScenario('blocked-task.yaml') } },
    });
    expect((await client.wait(id, { timeoutMs: TIMEOUT })).session.state).toBe('BLOCKED');
    const resume = { sessionId: id, mode: 'retry' as const, requestId: 'r1' };
    const eventId = jobIds.resume(id, 'r1');
    expect((await applyEvent(ctx, 'resume', resume, eventId)).status).toBe('OK');
    await applyEvent(ctx, 'resume', resume, eventId);
    const view = await client.wait(id, { timeoutMs: TIMEOUT, until: 'finished' });
    expect(view.session.state).toBe('COMPLETED');
    const h = await historyOf(client, id);
    expect(decisions(h, 'resume:retry')).toHaveLength(1);
    expect(executionsOf(h, 't2')).toHaveLength(2);
  });
});

describe('submit', () => {
  it('returns the same session for the same idempotency key', async () => {
    cluster = await startCluster();
    const { client } = cluster;
    const request = {
      instruction: 'Run the diamond',
      idempotencyKey: 'order-42',
      config: { llm: { scenario: exampleScenario('diamond.yaml') } },
    };
    const first = await client.submit(request);
    const second = await client.submit(request);
    expect(second.id).toBe(first.id);
    // Concurrent submits with one key agree too.
    const concurrent = await Promise.all(
      [1, 2, 3, 4].map(() => client.submit({ ...request, idempotencyKey: 'order-43' })),
    );
    expect(new Set(concurrent.map((s) => s.id)).size).toBe(1);

    const sessions = await client.list();
    expect(sessions.map((s) => s.id).sort()).toEqual([first.id, concurrent[0]!.id].sort());
    for (const id of [first.id, concurrent[0]!.id]) {
      expect((await client.wait(id, { timeoutMs: TIMEOUT })).session.state).toBe('COMPLETED');
      const h = await historyOf(client, id);
      expect(h.filter((e) => e.type === 'state_change' && e.to === 'PLANNING')).toHaveLength(1);
      expect(h.filter((e) => e.type === 'plan')).toHaveLength(1);
    }
  });

  it('finishes, on a retry with the same key, a submit that died after storing its session', async () => {
    cluster = await startCluster();
    const { client } = cluster;
    const store = cluster.pods[0]!.store;
    // What the first submit got done before its process was killed: the key claimed and the
    // session stored with its plan job in the outbox; neither indexed nor enqueued.
    const stored = { ...makeSession({}, 'Write the notes'), state: 'PLANNING' as const };
    expect(await store.claimIdempotencyKey('order-44', stored.id)).toBeUndefined();
    await store.apply(stored.id, {
      eventId: `submit|${stored.id}`,
      session: { record: { ...stored, idempotencyKey: 'order-44' }, expectedVersion: 0 },
      outbox: [
        outboxJob('plan', 'plan', jobIds.plan(stored.id, 0), { sessionId: stored.id, attempt: 0 }),
      ],
    });
    expect((await client.list()).map((s) => s.id)).not.toContain(stored.id);

    const retried = await client.submit({
      instruction: 'Write the notes',
      idempotencyKey: 'order-44',
    });
    expect(retried.id).toBe(stored.id);
    expect((await client.wait(stored.id, { timeoutMs: TIMEOUT })).session.state).toBe('COMPLETED');
    expect((await client.list()).map((s) => s.id)).toContain(stored.id);
  });

  it('refuses a bad submit with a ValidationError naming the field', async () => {
    cluster = await startCluster();
    const { client } = cluster;
    const refused = async (request: unknown) => {
      const error = await client.submit(request as never).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(error).toBeInstanceOf(ValidationError);
      return error as ValidationError;
    };

    const empty = await refused({ instruction: '   ' });
    expect(empty.issues).toEqual([
      { path: 'instruction', message: 'instruction must not be empty' },
    ]);

    // One problem, said once: not also the rule about spaces at its ends.
    const emptyKey = await refused({ instruction: 'x', idempotencyKey: '' });
    expect(emptyKey.issues).toEqual([
      { path: 'idempotencyKey', message: 'an idempotency key must not be empty' },
    ]);
    const badId = await client.get('').then(
      () => undefined,
      (e: unknown) => e as ValidationError,
    );
    expect(badId?.issues.map((i) => i.message)).toEqual(['a session id must not be empty']);

    const typo = await refused({ instruction: 'x', config: { refinement: { noiseTreshold: 3 } } });
    expect(typo.message).toContain('config.refinement.noiseTreshold');
    expect(typo.issues[0]?.path).toBe('config.refinement.noiseTreshold');

    const range = await refused({
      instruction: 'x',
      config: { refinement: { noiseThreshold: 50 } },
    });
    expect(range.issues[0]?.path).toBe('config.refinement.noiseThreshold');

    const unknown = await refused({ instruction: 'x', priority: 'high' });
    expect(unknown.message).toContain('priority');

    const notSessionConfig = await refused({ instruction: 'x', config: { redis: { url: 'x' } } });
    expect(notSessionConfig.message).toContain('config.redis');

    // Nothing was stored for any of them.
    expect(await client.list()).toEqual([]);
  });
});

describe('a job delivered again after its task moved on', () => {
  it('neither executes nor judges a task that is DONE again', async () => {
    const gate = deferred();
    const { models, calls } = recordingModels(
      {
        plans: [
          {
            tasks: [
              { id: 'A', title: 'A', acceptance: 'a', context: 'c' },
              { id: 'B', title: 'B', acceptance: 'b', context: 'c', dependencies: ['A'] },
            ],
          },
        ],
        planJudgements: [{ score: 90, isAcceptable: true }],
      },
      {
        beforeExecute: async (request) => {
          if (request.task.id === 'B') await gate.promise;
        },
      },
    );
    cluster = await startCluster({ models });
    const { client } = cluster;
    const pod = cluster.pods[0]!;
    const { id } = await client.submit({ instruction: 'A then B' });
    await eventually(
      async () => ((await pod.store.loadTask(id, 'A'))?.task.state === 'DONE' ? true : undefined),
      'A done',
    );
    // BullMQ delivers a stalled job's payload again; other job ids stand for that here.
    const work = await pod.queues
      .get('work')
      .add('execute', { sessionId: id, taskId: 'A', attempt: 1 }, { jobId: 'again-work-A-1' });
    const result = (await pod.store.loadTask(id, 'A'))?.task.result;
    const judge = await pod.queues
      .get('judge')
      .add(
        'judge-task',
        { sessionId: id, taskId: 'A', attempt: 1, result },
        { jobId: 'again-judge-A-1' },
      );
    const returned = async (job: typeof work) =>
      eventually(async () => (await job.getState()) === 'completed' || undefined, 'the job done');
    await returned(work);
    await returned(judge);
    expect((await pod.queues.get('work').getJob('again-work-A-1'))?.returnvalue).toBe('stale');
    expect((await pod.queues.get('judge').getJob('again-judge-A-1'))?.returnvalue).toBe('stale');
    gate.resolve();
    expect((await client.wait(id, { timeoutMs: TIMEOUT })).session.state).toBe('COMPLETED');
    expect(calls.execute.filter((r) => r.task.id === 'A')).toHaveLength(1);
    expect(calls.judgeTask.filter((r) => r.task.id === 'A')).toHaveLength(1);
  });
});

describe('a replan', () => {
  it('names its subtasks apart from a task of the plan that looks like one (A and A.r1.1)', async () => {
    cluster = await startCluster({
      models: createBuiltinModels({
        scenario: {
          plans: [
            {
              tasks: [
                { id: 'A', title: 'A', acceptance: 'a', context: 'c' },
                { id: 'A.r1.1', title: 'unrelated', acceptance: 'x', context: 'c' },
              ],
            },
          ],
          planJudgements: [{ score: 90, isAcceptable: true }],
          tasks: {
            A: {
              judgements: [{ success: false, shouldReplan: true, reason: 'too big' }],
              replan: {
                reason: 'split',
                tasks: [
                  { id: 's1', title: 's1', acceptance: 'a', context: 'c' },
                  { id: 's2', title: 's2', acceptance: 'a', context: 'c' },
                ],
              },
            },
          },
        },
      }),
    });
    const { client } = cluster;
    const { id } = await client.submit({ instruction: 'A and the other' });
    const view = await client.wait(id, { timeoutMs: TIMEOUT });
    expect(view.session.state).toBe('COMPLETED');
    expect(view.tasks.map((t) => [t.id, t.state])).toEqual([
      ['A', 'REPLACED_BY_REPLAN'],
      ['A.r1.1', 'DONE'],
      ['A.r1.1_2', 'DONE'],
      ['A.r1.2', 'DONE'],
    ]);
  });
});
