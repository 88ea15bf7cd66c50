import { afterAll, describe, expect, it } from 'vitest';
import type { OrqConfigInput } from '../../src/shared/config/schema.js';
import type { RoleModels } from '../../src/workers/llm/types.js';
import { clusterPerTest, type TestCluster } from '../support/cluster.js';
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
  taskMoved,
} from '../support/scenarios.js';

let cluster: TestCluster | undefined;
const startCluster = clusterPerTest();
const scenarios = scenarioDir();
afterAll(() => scenarios.cleanup());

const TIMEOUT = 15_000;
/**
 * Two tries per role job, retried at once, so a failing job is reported quickly (coordinator
 * events get ten: their backoff doubles from 1 ms, half a second in all, where 10 ms made 5 s).
 */
const fastRetries: OrqConfigInput = { queues: { attempts: 2, backoffMs: 1 } };

describe('plans with repeated dependencies', () => {
  it('a task naming a dependency twice still waits for all of its dependencies', async () => {
    const path = scenarios.write('repeated-dependency', {
      plans: [
        {
          tasks: [
            { id: 'A', title: 'A', acceptance: 'a', context: 'c' },
            { id: 'B', title: 'B', acceptance: 'b', context: 'c' },
            { id: 'D', title: 'D', acceptance: 'd', context: 'c', dependencies: ['A', 'A', 'B'] },
          ],
        },
      ],
      planJudgements: [{ score: 90, isAcceptable: true }],
    });
    // B's execution waits until A is DONE, so a D released by A alone would run before B.
    const aDone = deferred();
    const { models } = recordingModels(path, {
      async beforeExecute(request) {
        if (request.task.id === 'B') await aDone.promise;
      },
    });
    cluster = await startCluster({ models });
    const { client, pods } = cluster;
    const { id } = await client.submit({ instruction: 'x' });
    try {
      await eventually(async () => {
        const a = await pods[0]!.store.loadTask(id, 'A');
        return a?.task.state === 'DONE' ? true : undefined;
      }, 'A to be done');
    } finally {
      aDone.resolve();
    }
    const view = await client.wait(id, { timeoutMs: TIMEOUT });
    expect(view.session.state).toBe('COMPLETED');
    const h = await historyOf(client, id);
    expect(taskMoved(h, 'D', 'RUNNING')).toBeGreaterThan(taskMoved(h, 'B', 'DONE'));
    expect(view.tasks.find((t) => t.id === 'D')?.dependencies).toEqual(['A', 'B']);
    expect(view.tasks.find((t) => t.id === 'D')?.result?.output).toContain('Used B');
  });
});

describe('failing role jobs', () => {
  it('retries a transient worker failure and runs the task once', async () => {
    const path = scenarios.write('transient', {
      ...{ plans: [{ tasks: [{ id: 'A', title: 'A', acceptance: 'a', context: 'c' }] }] },
      planJudgements: [{ score: 90, isAcceptable: true }],
      failures: [{ role: 'worker', taskId: 'A', times: 1 }],
    });
    cluster = await startCluster({ config: fastRetries });
    const { client } = cluster;
    const { id } = await client.submit({ instruction: 'x', config: { llm: { scenario: path } } });
    const view = await client.wait(id, { timeoutMs: TIMEOUT });
    expect(view.session.state).toBe('COMPLETED');
    expect(view.tasks[0]).toMatchObject({ state: 'DONE', attempts: 1 });
    expect(executionsOf(await historyOf(client, id), 'A')).toHaveLength(1);
  });

  it('blocks a task whose worker keeps failing and records why', async () => {
    const path = scenarios.write('worker-fails', {
      ...A_THEN_B,
      tasks: { A: { results: [{ error: 'the sandbox is gone' }] } },
    });
    cluster = await startCluster({ config: fastRetries });
    const { client } = cluster;
    const { id } = await client.submit({ instruction: 'x', config: { llm: { scenario: path } } });
    const view = await client.wait(id, { timeoutMs: TIMEOUT });
    expect(view.session.state).toBe('BLOCKED');
    expect(view.tasks.map((t) => [t.id, t.state])).toEqual([
      ['A', 'BLOCKED'],
      ['B', 'READY'],
    ]);
    const h = await historyOf(client, id);
    const error = h.find((e) => e.type === 'error');
    expect(error).toMatchObject({ role: 'worker', taskId: 'A', code: 'LLM_CALL_FAILED' });
    expect(error?.type === 'error' && error.message).toContain('the sandbox is gone');
  });

  it('blocks a task whose check before it runs keeps failing, and a resume runs it', async () => {
    // judging.checkAlreadySatisfied: the judge's check-task job fails every try. Its failure
    // names the task but no attempt (the check comes before the first execution's verdict).
    const path = scenarios.write('check-fails', {
      ...A_THEN_B,
      tasks: { A: { beforeRun: { error: 'judge unreachable' } } },
    });
    cluster = await startCluster({ config: fastRetries });
    const { client } = cluster;
    const { id } = await client.submit({
      instruction: 'x',
      config: { llm: { scenario: path }, judging: { checkAlreadySatisfied: true } },
    });
    const view = await client.wait(id, { timeoutMs: TIMEOUT });
    expect(view.session.state).toBe('BLOCKED');
    expect(view.tasks.map((t) => [t.id, t.state])).toEqual([
      ['A', 'BLOCKED'],
      ['B', 'READY'],
    ]);
    const error = (await historyOf(client, id)).find((e) => e.type === 'error');
    expect(error).toMatchObject({ role: 'judge', taskId: 'A' });
    expect(error?.type === 'error' && error.message).toContain('judge unreachable');

    // Resumed, the task runs without a second check (B's check answers "not met").
    await client.resume(id, { mode: 'retry' });
    const done = await client.wait(id, { timeoutMs: TIMEOUT });
    expect(done.session.state).toBe('COMPLETED');
  });

  it('fails the session when the planner keeps failing', async () => {
    const path = scenarios.write('planner-fails', { plans: [{ error: 'model overloaded' }] });
    cluster = await startCluster({ config: fastRetries });
    const { client } = cluster;
    const { id } = await client.submit({ instruction: 'x', config: { llm: { scenario: path } } });
    const view = await client.wait(id, { timeoutMs: TIMEOUT });
    expect(view.session.state).toBe('FAILED');
    expect(view.session.failure).toMatchObject({ code: 'ROLE_FAILED' });
    expect(view.session.failure?.reason).toContain('model overloaded');
  });
});

describe('coordinator events that keep failing', () => {
  /** Makes the pod's coordinator write fail, every try, for the events `refuse` picks. */
  function refuseWrites(
    target: TestCluster,
    refuse: (eventId: string) => boolean,
    message: string,
  ): { count: number; stop(): void } {
    const store = target.pods[0]?.store;
    if (!store) throw new Error('the cluster has no pod');
    const apply = store.apply.bind(store);
    const refused = {
      count: 0,
      stop: () => {
        store.apply = apply;
      },
    };
    store.apply = async (sessionId, changeset) => {
      if (refuse(changeset.eventId)) {
        refused.count += 1;
        throw new Error(message);
      }
      return apply(sessionId, changeset);
    };
    return refused;
  }

  it('blocks the task whose verdict could not be applied, and a resume runs it again', async () => {
    const path = scenarios.write('verdict-lost', A_THEN_B);
    cluster = await startCluster({ config: fastRetries });
    const { client } = cluster;
    // Every try of the coordinator's write for A's first verdict fails (Redis refusing it, a
    // bug): before, the event was dropped after its last try and the session waited for ever.
    const refused = refuseWrites(
      cluster,
      (eventId) => /^ev-task-judged\|.*\|A\|1$/.test(eventId),
      'write refused by the test',
    );
    const { id } = await client.submit({ instruction: 'x', config: { llm: { scenario: path } } });
    const blocked = await client.wait(id, { timeoutMs: TIMEOUT });
    expect(blocked.session.state).toBe('BLOCKED');
    expect(blocked.tasks.map((t) => [t.id, t.state])).toEqual([
      ['A', 'BLOCKED'],
      ['B', 'READY'],
    ]);
    expect(refused.count).toBe(10); // the coordinator's attempts (at least 10 for every event)
    const error = (await historyOf(client, id)).find((e) => e.type === 'error');
    expect(error).toMatchObject({ role: 'coordinator', taskId: 'A', attempt: 1 });
    expect(error?.type === 'error' && error.message).toContain('write refused by the test');

    await client.resume(id, { mode: 'retry' });
    const done = await client.wait(id, { timeoutMs: TIMEOUT });
    expect(done.session.state).toBe('COMPLETED');
    expect(done.tasks.map((t) => [t.id, t.state, t.attempts])).toEqual([
      ['A', 'DONE', 2],
      ['B', 'DONE', 1],
    ]);
  });

  it('blocks the task whose check before it runs could not be applied', async () => {
    const path = scenarios.write('check-lost', A_THEN_B);
    cluster = await startCluster({ config: fastRetries });
    const { client } = cluster;
    const refused = refuseWrites(
      cluster,
      (eventId) => eventId.startsWith('ev-task-checked|') && eventId.includes('|A'),
      'check write refused by the test',
    );
    const { id } = await client.submit({
      instruction: 'x',
      config: { llm: { scenario: path }, judging: { checkAlreadySatisfied: true } },
    });
    const blocked = await client.wait(id, { timeoutMs: TIMEOUT });
    expect(blocked.session.state).toBe('BLOCKED');
    expect(blocked.tasks.map((t) => [t.id, t.state])).toEqual([
      ['A', 'BLOCKED'],
      ['B', 'READY'],
    ]);
    expect(refused.count).toBe(10);
    const error = (await historyOf(client, id)).find((e) => e.type === 'error');
    expect(error).toMatchObject({ role: 'coordinator', taskId: 'A', attempt: 1 });
  });

  it('says an answer it could not apply was not applied, and keeps the question open', async () => {
    const path = scenarios.write('answer-lost', {
      ...A_THEN_B,
      tasks: {
        B: {
          judgements: [
            { success: false, reason: 'no registry given', question: 'Which registry?' },
            { success: true, reason: 'pushed' },
          ],
        },
      },
    });
    cluster = await startCluster({ config: fastRetries });
    const { client } = cluster;
    const { id } = await client.submit({ instruction: 'x', config: { llm: { scenario: path } } });
    expect((await client.wait(id, { timeoutMs: TIMEOUT })).session.state).toBe('BLOCKED');
    const refused = refuseWrites(
      cluster,
      (eventId) => eventId.startsWith('ev-answer|'),
      'answer write refused by the test',
    );
    // Before, the answer's event was dropped after its last try: the person was told it was
    // queued, and nothing ever said it was lost.
    const lost = await client
      .answerQuestion(id, 'staging', { waitMs: TIMEOUT })
      .catch((error: unknown) => error);
    expect(lost).toMatchObject({ code: 'ANSWER_NOT_APPLIED' });
    expect((lost as Error).message).toContain('answer write refused by the test');
    expect((lost as Error).message).toContain('the wait question-B-1 is still open');
    expect(refused.count).toBe(10);
    const history = await historyOf(client, id);
    expect(history.find((e) => e.type === 'error')).toMatchObject({ role: 'coordinator' });
    expect(decisions(history, 'wait:answer-failed')).toEqual([
      expect.objectContaining({ inputs: expect.objectContaining({ stillOpen: true }) }),
    ]);
    expect((await client.get(id)).session.questions?.map((q) => q.id)).toEqual(['question-B-1']);

    // Once the coordinator can write again, the person's next answer is applied.
    refused.stop();
    await client.answerQuestion(id, 'staging', { waitMs: TIMEOUT });
    expect((await client.wait(id, { timeoutMs: TIMEOUT })).session.state).toBe('COMPLETED');
  });

  it("says a plan approval's timeout it could not apply was not applied, and the wait stays open", async () => {
    cluster = await startCluster({ config: fastRetries });
    const { client } = cluster;
    refuseWrites(
      cluster,
      (eventId) => eventId.startsWith('ev-wait-timed-out|'),
      'timeout write refused by the test',
    );
    const { id } = await client.submit({
      instruction: 'x',
      config: { approval: { plan: 'required', timeoutSeconds: 1, onTimeout: 'reject' } },
    });
    const failed = await eventually(
      async () => decisions(await historyOf(client, id), 'wait:timeout-failed')[0],
      'the timeout reported as not applied',
      TIMEOUT,
    );
    expect(failed.reason).toContain('timeout write refused by the test');
    expect(failed.reason).toContain('the wait plan-0 stays open until a person answers it');
    expect((await client.get(id)).session.state).toBe('AWAITING_APPROVAL');
  });

  it('fails the session when the verdict on its plan cannot be applied', async () => {
    cluster = await startCluster({ config: fastRetries });
    const { client } = cluster;
    refuseWrites(
      cluster,
      (eventId) => eventId.startsWith('ev-plan-judged|'),
      'plan write refused by the test',
    );
    const { id } = await client.submit({ instruction: 'x' });
    const view = await client.wait(id, { timeoutMs: TIMEOUT });
    expect(view.session.state).toBe('FAILED');
    expect(view.session.failure).toMatchObject({ code: 'ROLE_FAILED' });
    expect(view.session.failure?.reason).toContain('coordinator failed on plan attempt 0');
    expect(view.session.failure?.reason).toContain('plan write refused by the test');
  });
});

describe('malformed model replies', () => {
  /** The builtin provider with one role's reply replaced by something off-schema. */
  function malformed(overrides: Partial<RoleModels>): RoleModels {
    const { models } = recordingModels(exampleScenario('diamond.yaml'));
    return { ...models, ...overrides } as RoleModels;
  }

  it('fails the session with the reason when the judge scores a plan off-schema', async () => {
    const models = malformed({
      judgePlan: async () => ({
        value: { score: 'great' } as never,
        usage: { inputTokens: 0, outputTokens: 0 },
      }),
    });
    cluster = await startCluster({ config: fastRetries, models });
    const { client } = cluster;
    const { id } = await client.submit({ instruction: 'x' });
    const view = await client.wait(id, { timeoutMs: TIMEOUT });
    expect(view.session.state).toBe('FAILED');
    expect(view.session.failure?.code).toBe('ROLE_FAILED');
    const h = await historyOf(client, id);
    expect(h.find((e) => e.type === 'error')).toMatchObject({
      role: 'judge',
      code: 'LLM_OUTPUT_INVALID',
    });
  });

  it('blocks the task with the reason when the judge answers a task off-schema', async () => {
    const models = malformed({
      judgeTask: async () => ({
        value: { verdict: 'ok' } as never,
        usage: { inputTokens: 0, outputTokens: 0 },
      }),
    });
    cluster = await startCluster({ config: fastRetries, models });
    const { client } = cluster;
    const { id } = await client.submit({ instruction: 'x' });
    const view = await client.wait(id, { timeoutMs: TIMEOUT });
    expect(view.session.state).toBe('BLOCKED');
    expect(view.tasks.find((t) => t.id === 'A')?.state).toBe('BLOCKED');
    const h = await historyOf(client, id);
    expect(h.find((e) => e.type === 'error')).toMatchObject({
      role: 'judge',
      taskId: 'A',
      code: 'LLM_OUTPUT_INVALID',
    });
  });

  it('blocks the task and names the worker when an execution result is off-schema', async () => {
    let executions = 0;
    const models = malformed({
      execute: async () => {
        executions += 1;
        return { output: 42, tokenUsage: { inputTokens: 5, outputTokens: 1 } } as never;
      },
    });
    cluster = await startCluster({ config: fastRetries, models });
    const { client } = cluster;
    const { id } = await client.submit({ instruction: 'x' });
    const view = await client.wait(id, { timeoutMs: TIMEOUT });
    expect(view.session.state).toBe('BLOCKED');
    const h = await historyOf(client, id);
    expect(h.find((e) => e.type === 'error')).toMatchObject({
      role: 'worker',
      taskId: 'A',
      code: 'LLM_OUTPUT_INVALID',
    });
    // Usage that had no result to go on with is counted by the worker itself, every execution.
    expect(executions).toBeGreaterThan(0);
    expect(view.usage.byRole.worker).toMatchObject({
      calls: executions,
      inputTokens: 5 * executions,
    });
  });

  it('blocks the task with the reason when the replanner answers off-schema', async () => {
    const path = exampleScenario('replan-task.yaml');
    const { models: base } = recordingModels(path);
    const models: RoleModels = {
      ...base,
      label: base.label,
      replan: async () => ({
        value: { tasks: [] } as never,
        usage: { inputTokens: 0, outputTokens: 0 },
      }),
    };
    cluster = await startCluster({ config: fastRetries, models });
    const { client } = cluster;
    const { id } = await client.submit({ instruction: 'x' });
    const view = await client.wait(id, { timeoutMs: TIMEOUT });
    expect(view.session.state).toBe('BLOCKED');
    expect(view.tasks.find((t) => t.id === 't2')).toMatchObject({
      state: 'BLOCKED',
      replanPending: false,
    });
    const h = await historyOf(client, id);
    expect(h.find((e) => e.type === 'error')).toMatchObject({
      role: 'replanner',
      taskId: 't2',
      code: 'LLM_OUTPUT_INVALID',
    });
  });
});

describe('replanning.timeoutSeconds', () => {
  it('stops a Replanner that runs past it and blocks the task, saying so', async () => {
    const { models: base } = recordingModels(exampleScenario('replan-task.yaml'));
    const replanning = deferred();
    const models: RoleModels = {
      ...base,
      label: base.label,
      // A model that never answers: only the timeout's abort ends the call.
      replan: (request) => {
        replanning.resolve();
        return new Promise((_, reject) => {
          request.signal?.addEventListener('abort', () => reject(request.signal?.reason));
        });
      },
    };
    cluster = await startCluster({ config: fastRetries, models });
    const { client } = cluster;
    const { id } = await client.submit({
      instruction: 'x',
      config: { replanning: { timeoutSeconds: 1 } },
    });
    await replanning.promise;
    const view = await client.wait(id, { timeoutMs: TIMEOUT });
    expect(view.session.state).toBe('BLOCKED');
    expect(view.tasks.find((t) => t.id === 't2')).toMatchObject({
      state: 'BLOCKED',
      replanPending: false,
    });
    const error = (await historyOf(client, id)).find((e) => e.type === 'error');
    expect(error).toMatchObject({ role: 'replanner', taskId: 't2', code: 'LLM_CALL_FAILED' });
    expect(error?.type === 'error' && error.message).toContain(
      'replanning t2 exceeded 1s (replanning.timeoutSeconds)',
    );
  });
});

describe('per-session configuration', () => {
  it("honours a session's legacy maxQualityRetries when maxRefinementAttempts is not given", async () => {
    const path = scenarios.write('unacceptable', {
      planJudgements: [{ score: 40, isAcceptable: false, issues: ['vague'] }],
    });
    cluster = await startCluster();
    const { client } = cluster;
    const { id, config } = await client.submit({
      instruction: 'Build a form and validate it',
      config: { refinement: { maxQualityRetries: 0 }, llm: { scenario: path } },
    });
    expect(config.refinement.maxRefinementAttempts).toBe(0);
    const view = await client.wait(id, { timeoutMs: TIMEOUT });
    expect(view.session.state).toBe('FAILED');
    const [reject] = decisions(await historyOf(client, id), 'refinement:reject');
    expect(reject?.inputs).toMatchObject({ reasonCode: 'max_attempts_reached', attemptCount: 0 });

    // Both given: maxRefinementAttempts wins (seed 000).
    const both = await client.submit({
      instruction: 'x',
      config: { refinement: { maxQualityRetries: 0, maxRefinementAttempts: 3 } },
    });
    expect(both.config.refinement.maxRefinementAttempts).toBe(3);
    await client.cancel(both.id);
  });
});
