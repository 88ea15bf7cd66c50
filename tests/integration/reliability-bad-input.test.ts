import fc from 'fast-check';
import type { ZodType } from 'zod';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { PlanBreakdown, QualityJudgement, ReplanBreakdown } from '../../src/shared/domain/plan.js';
import { TaskJudgement, TaskResult } from '../../src/shared/domain/task.js';
import { createBuiltinModels } from '../../src/workers/llm/builtin.js';
import type { ScenarioInput } from '../../src/shared/config/scenario.js';
import type { RoleModels } from '../../src/workers/llm/types.js';
import { silentLogger } from '../../src/shared/logger.js';
import { TaskJudgedEvent } from '../../src/shared/queues.js';
import { SubmitRequest } from '../../src/producers/client.js';
import { applyEvent } from '../../src/workers/coordinator/coordinator.js';
import type { RunningHttpServer } from '../../src/producers/http/server.js';
import { startCluster, type TestCluster } from '../support/cluster.js';
import { garbage, garbageWith, nearMisses } from '../support/fuzz.js';
import { historyOf, scenarioDir } from '../support/scenarios.js';
import { serveApi } from '../support/http.js';

let cluster: TestCluster | undefined;
let server: RunningHttpServer | undefined;
const scenarios = scenarioDir();
afterEach(async () => {
  await server?.close();
  await cluster?.close();
  cluster = server = undefined;
});
afterAll(() => scenarios.cleanup());

const TIMEOUT = 15_000;
const SEED = Number(process.env.FUZZ_SEED ?? 7_000_007);
/** Two tries per role job, retried at once: a failing model is called exactly twice. */
const ATTEMPTS = 2;
const fastRetries = { queues: { attempts: ATTEMPTS, backoffMs: 10 } };

type Method = 'plan' | 'judgePlan' | 'execute' | 'judgeTask' | 'replan';
const REPLY_SCHEMA: Record<Method, ZodType> = {
  plan: PlanBreakdown,
  judgePlan: QualityJudgement,
  execute: TaskResult,
  judgeTask: TaskJudgement,
  replan: ReplanBreakdown,
};
const ROLE: Record<Method, string> = {
  plan: 'planner',
  judgePlan: 'judge',
  execute: 'worker',
  judgeTask: 'judge',
  replan: 'replanner',
};

/** One task A, judged "replan" so that the Replanner is called too. */
const base: ScenarioInput = {
  plans: [{ tasks: [{ id: 'A', title: 'Build it', acceptance: 'it works', context: 'c' }] }],
  planJudgements: [{ score: 90, isAcceptable: true }],
  tasks: { A: { judgements: [{ success: false, shouldReplan: true, reason: 'too big' }] } },
};

/** The scenario with the entry that scripts `method`'s reply replaced by `{ error }`. */
function failing(method: Method, error: string): ScenarioInput {
  const failure = { error };
  switch (method) {
    case 'plan':
      return { ...base, plans: [failure] };
    case 'judgePlan':
      return { ...base, planJudgements: [failure] };
    case 'execute':
      return { ...base, tasks: { A: { ...base.tasks!.A, results: [failure] } } };
    case 'judgeTask':
      return { ...base, tasks: { A: { judgements: [failure] } } };
    case 'replan':
      return { ...base, tasks: { A: { ...base.tasks!.A, replan: failure } } };
  }
}

/** `models` counting its calls per method; `replace` swaps in other replies for one method. */
function counted(models: RoleModels, replace?: { method: Method; reply: () => unknown }) {
  const calls: Record<Method, number> = {
    plan: 0,
    judgePlan: 0,
    execute: 0,
    judgeTask: 0,
    replan: 0,
  };
  const wrap =
    <M extends Method>(method: M) =>
    async (request: never) => {
      calls[method] += 1;
      if (replace?.method === method) return replace.reply();
      return (models[method] as (r: never) => Promise<unknown>)(request);
    };
  const wrapped = {
    label: models.label,
    plan: wrap('plan'),
    judgePlan: wrap('judgePlan'),
    execute: wrap('execute'),
    judgeTask: wrap('judgeTask'),
    replan: wrap('replan'),
  } as unknown as RoleModels;
  return { models: wrapped, calls };
}

/** Runs a session on `models` and checks the bounded retry and the failure in its history. */
async function expectClearFailure(
  models: RoleModels,
  calls: Record<Method, number>,
  method: Method,
) {
  cluster = await startCluster({ config: fastRetries, models });
  const { client } = cluster;
  const { id } = await client.submit({ instruction: 'build it' });
  const view = await client.wait(id, { timeoutMs: TIMEOUT });
  const planning = method === 'plan' || method === 'judgePlan';
  expect(view.session.state).toBe(planning ? 'FAILED' : 'BLOCKED');
  expect(calls[method]).toBe(ATTEMPTS);
  const h = await historyOf(client, id);
  const errors = h.filter((e) => e.type === 'error');
  expect(errors).toHaveLength(1);
  expect(errors[0]).toMatchObject({
    role: ROLE[method],
    ...(planning ? {} : { taskId: 'A' }),
  });
  if (planning) expect(view.session.failure?.reason).toContain(ROLE[method]);
  else expect(view.tasks.find((t) => t.id === 'A')?.state).toBe('BLOCKED');
  return errors[0] as Extract<(typeof h)[number], { type: 'error' }>;
}

const METHODS: Method[] = ['plan', 'judgePlan', 'execute', 'judgeTask', 'replan'];

describe('malformed model replies into each consumer', () => {
  it.each(METHODS)(
    'the %s call that keeps failing is retried a bounded number of times, then recorded',
    async (method) => {
      const { models, calls } = counted(
        createBuiltinModels({ scenario: failing(method, 'the model is on fire') }),
      );
      const error = await expectClearFailure(models, calls, method);
      expect(error).toMatchObject({ code: 'LLM_CALL_FAILED' });
      expect(error.message).toContain('the model is on fire');
    },
  );

  it.each(METHODS)(
    'the %s reply off its schema is retried a bounded number of times, then recorded',
    async (method) => {
      // Arbitrary JSON and prose the reply schema refuses, one per call.
      const replies = [
        "Sure! Here's what you asked for.",
        ...garbage(REPLY_SCHEMA[method], { count: 5, seed: SEED }),
      ];
      let n = 0;
      const reply = () => {
        const value = replies[n++ % replies.length];
        return method === 'execute' ? value : { value, usage: { inputTokens: 1, outputTokens: 1 } };
      };
      const { models, calls } = counted(createBuiltinModels({ scenario: base }), { method, reply });
      const error = await expectClearFailure(models, calls, method);
      expect(error).toMatchObject({ code: 'LLM_OUTPUT_INVALID' });
      expect(error.message).toMatch(/does not match its schema/);
    },
  );
});

describe('malformed coordinator events', () => {
  it('records each one in its session history and never applies it', async () => {
    cluster = await startCluster({ config: fastRetries });
    const { client } = cluster;
    const pod = cluster.pods[0]!;
    const ctx = { store: pod.store, queues: pod.queues, logger: silentLogger };
    const { id } = await client.submit({ instruction: 'write docs' });
    const view = await client.wait(id, { timeoutMs: TIMEOUT });
    const before = await historyOf(client, id);
    const valid = {
      sessionId: id,
      taskId: view.tasks[0]!.id,
      attempt: 1,
      result: {
        output: 'x',
        log: '',
        artifacts: [],
        tokenUsage: { inputTokens: 0, outputTokens: 0 },
        durationMs: 0,
      },
      judgement: {
        success: true,
        shouldContinue: false,
        shouldReplan: false,
        reason: 'ok',
        missingRequirements: [],
      },
    };
    const bad = [
      ...nearMisses(valid, TaskJudgedEvent, { count: 8, seed: SEED, keep: ['sessionId'] }),
      ...garbageWith(valid, { sessionId: id }, TaskJudgedEvent, { count: 4, seed: SEED }),
    ];
    for (const [i, data] of bad.entries()) {
      const refused = await applyEvent(ctx, 'task-judged', data, `bad-${i}`).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(refused).toMatchObject({ code: 'VALIDATION_FAILED' });
    }
    const unknown = await applyEvent(ctx, 'no-such-event', { sessionId: id }, 'bad-name').catch(
      (e: unknown) => e,
    );
    expect(unknown).toMatchObject({ code: 'VALIDATION_FAILED' });

    const after = await client.get(id);
    expect(after.session).toEqual(view.session);
    expect(after.tasks).toEqual(view.tasks);
    const added = (await historyOf(client, id)).slice(before.length);
    expect(added).toHaveLength(bad.length + 1);
    added.forEach((e, i) =>
      expect(e).toMatchObject({
        type: 'error',
        role: 'coordinator',
        code: 'VALIDATION_FAILED',
        message: expect.stringMatching(
          i < bad.length
            ? `^rejected task-judged event bad-${i}: Invalid`
            : '^rejected no-such-event',
        ),
      }),
    );
  });
});

describe('HTTP bodies', () => {
  it('answers every fuzzed body with a 2xx or a 4xx naming the problem, never a 5xx', async () => {
    // No roles: sessions created by the fuzz only wait in PLANNING.
    cluster = await startCluster({ pods: 0 });
    server = await serveApi(cluster.client);
    const { id } = await cluster.client.submit({ instruction: 'a session to poke at' });
    const post = (path: string, body: string, type = 'application/json') =>
      fetch(`${server!.url}${path}`, { method: 'POST', headers: { 'content-type': type }, body });

    const submitLike = {
      instruction: 'x',
      config: { refinement: { noiseThreshold: 2 } },
      idempotencyKey: 'k',
      metadata: { a: 'b' },
    };
    const bodies: [string, string][] = [
      ...fc
        .sample(fc.jsonValue(), { numRuns: 40, seed: SEED })
        .map((v): [string, string] => ['/sessions', JSON.stringify(v)]),
      ...nearMisses(submitLike, SubmitRequest, { count: 30, seed: SEED }).map(
        (v): [string, string] => ['/sessions', JSON.stringify(v)],
      ),
      ...fc
        .sample(fc.string(), { numRuns: 15, seed: SEED })
        .map((s): [string, string] => ['/sessions', s]),
      ...fc
        .sample(fc.jsonValue(), { numRuns: 25, seed: SEED + 1 })
        .map((v): [string, string] => [`/sessions/${id}/resume`, JSON.stringify(v)]),
      ...fc
        .sample(fc.jsonValue(), { numRuns: 25, seed: SEED + 2 })
        .map((v): [string, string] => [`/sessions/${id}/cancel`, JSON.stringify(v)]),
      ...fc
        .sample(fc.string({ minLength: 1 }), { numRuns: 15, seed: SEED + 3 })
        .map((s): [string, string] => [`/sessions/${encodeURIComponent(s)}/resume`, '{}']),
    ];
    for (const [path, body] of bodies) {
      const res = await post(path, body);
      const text = await res.text();
      expect(res.status, `${path} ${body} -> ${text}`).toBeLessThan(500);
      if (res.status >= 400) {
        const answer = JSON.parse(text) as { error: string; message: string };
        expect(answer.error, text).toMatch(/^[A-Z_]+$/);
        expect(answer.message.length).toBeGreaterThan(0);
      }
    }
    // Still serving, and a valid request still works.
    expect((await fetch(`${server.url}/healthz`)).status).toBe(200);
    expect((await post('/sessions', JSON.stringify({ instruction: 'still fine' }))).status).toBe(
      201,
    );
  });
});
