import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import type { TokenUsage } from '../../src/shared/domain/task.js';
import { createBuiltinModels } from '../../src/workers/llm/builtin.js';
import { countTokens } from '../../src/workers/llm/token-estimate.js';
import type { ScenarioInput } from '../../src/shared/config/scenario.js';
import type { RoleModels } from '../../src/workers/llm/types.js';
import { formatSessionTable } from '../../src/producers/cli/format.js';
import { UsageStore } from '../../src/shared/store/usage-store.js';
import { outboxJob } from '../../src/shared/queues.js';
import { orq } from '../support/cli.js';
import { clusterPerTest, type TestCluster } from '../support/cluster.js';
import {
  startFakeLlmServer,
  type FakeLlmRequest,
  type FakeLlmServer,
  type FakeReply,
  type Protocol,
} from '../support/fake-llm-server.js';
import {
  decisions,
  deferred,
  eventually,
  executionsOf,
  historyOf,
  scenarioDir,
} from '../support/scenarios.js';

let cluster: TestCluster | undefined;
const startCluster = clusterPerTest();
const scenarios = scenarioDir();
afterAll(() => scenarios.cleanup());

const TIMEOUT = 20_000;

/** Builtin models that note every call: in flight, the most in flight, and each call's usage. */
function observedModels(scenario: ScenarioInput, beforeExecute?: () => Promise<void>) {
  const inner = createBuiltinModels({ scenario });
  const seen = {
    calls: 0,
    inFlight: 0,
    maxInFlight: 0,
    executing: 0,
    maxExecuting: 0,
    usages: [] as TokenUsage[],
  };
  const observe = async <T>(call: () => Promise<T>, usage: (r: T) => TokenUsage): Promise<T> => {
    seen.calls += 1;
    seen.inFlight += 1;
    seen.maxInFlight = Math.max(seen.maxInFlight, seen.inFlight);
    try {
      const reply = await call();
      seen.usages.push(usage(reply));
      return reply;
    } finally {
      seen.inFlight -= 1;
    }
  };
  const models: RoleModels = {
    label: inner.label,
    plan: (r) =>
      observe(
        () => inner.plan(r),
        (x) => x.usage,
      ),
    judgePlan: (r) =>
      observe(
        () => inner.judgePlan(r),
        (x) => x.usage,
      ),
    judgeTask: (r) =>
      observe(
        () => inner.judgeTask(r),
        (x) => x.usage,
      ),
    replan: (r) =>
      observe(
        () => inner.replan(r),
        (x) => x.usage,
      ),
    execute: (r) =>
      observe(
        async () => {
          seen.executing += 1;
          seen.maxExecuting = Math.max(seen.maxExecuting, seen.executing);
          try {
            await beforeExecute?.();
            return await inner.execute(r);
          } finally {
            seen.executing -= 1;
          }
        },
        (x) => x.tokenUsage,
      ),
  };
  return { models, seen };
}

describe('token usage', () => {
  it('is recorded per role and per task and shown by client.get and orq status', async () => {
    cluster = await startCluster();
    const session = await cluster.client.submit({
      instruction: 'Write the parser and add the tests',
      config: { budget: { prices: { builtin: { inputPerMTok: 3, outputPerMTok: 15 } } } },
    });
    const view = await cluster.client.wait(session.id, { timeoutMs: TIMEOUT });
    expect(view.session.state).toBe('COMPLETED');

    const { usage } = view;
    expect(Object.keys(usage.byRole).sort()).toEqual(['judge', 'planner', 'worker']);
    // One plan, one plan judgement, and per task one execution and one task judgement.
    expect(usage.byRole.planner?.calls).toBe(1);
    expect(usage.byRole.worker?.calls).toBe(view.tasks.length);
    expect(usage.byRole.judge?.calls).toBe(1 + view.tasks.length);
    for (const task of view.tasks) {
      expect(usage.byTask[task.id]?.calls).toBe(2);
      // The worker's share of the task is what its result reports.
      expect(usage.byTask[task.id]?.inputTokens).toBeGreaterThan(
        task.result?.tokenUsage.inputTokens ?? 0,
      );
    }
    const sum = (pick: (u: { inputTokens: number }) => number) =>
      Object.values(usage.byRole).reduce((s, u) => s + pick(u), 0);
    expect(usage.total.inputTokens).toBe(sum((u) => u.inputTokens));
    expect(usage.total.usd).toBeCloseTo(
      (usage.total.inputTokens * 3 + usage.total.outputTokens * 15) / 1e6,
      4,
    );
    expect(usage.reserved.tokens).toBe(0);

    const table = formatSessionTable(view);
    expect(table).toContain(`tokens: ${usage.total.inputTokens + usage.total.outputTokens}`);
    expect(table).toMatch(/^\s+planner\s+\d+\s+\d+\s+1\s+\$/m);
    const t1 = usage.byTask.t1;
    expect(table).toMatch(new RegExp(`^t1\\s.*\\s${t1?.inputTokens}/${t1?.outputTokens}\\s`, 'm'));

    const status = await orq(['status', session.id], {
      env: { REDIS_URL: inject('redisUrl'), ORQ_PREFIX: cluster.prefix },
    });
    expect(status.stderr).toBe('');
    expect(status.stdout).toContain(
      `tokens: ${usage.total.inputTokens + usage.total.outputTokens}`,
    );
    expect(status.stdout).toMatch(/TOKENS IN\/OUT/);
  });

  it('rejects a maxUsd budget whose role models have no price', async () => {
    cluster = await startCluster({ pods: 0 });
    await expect(
      cluster.client.submit({
        instruction: 'Write the parser',
        config: {
          llm: { default: { provider: 'openai', model: 'gpt-4o-mini' } },
          budget: { maxUsd: 1 },
        },
      }),
    ).rejects.toThrow(/config\.budget\.prices.*gpt-4o-mini/);
  });
});

describe('a budget', () => {
  it('stops a session with four concurrent workers in BUDGET_EXHAUSTED without overspending', async () => {
    const ids = Array.from({ length: 12 }, (_, i) => `t${i + 1}`);
    const executeUsage = { inputTokens: 1000, outputTokens: 1000 };
    const scenario: ScenarioInput = {
      plans: [
        {
          summary: 'twelve independent tasks',
          tasks: ids.map((id) => ({
            id,
            title: `Part ${id}`,
            acceptance: `${id} done`,
            context: 'independent',
          })),
        },
      ],
      planJudgements: [{ score: 90, isAcceptable: true }],
      // Every execution reports 2000 tokens, more than the 1500 it reserves.
      tasks: Object.fromEntries(ids.map((id) => [id, { results: [{ tokenUsage: executeUsage }] }])),
    };
    // Hold the executions until four run at once, so the four workers really overlap.
    const fourRunning = deferred();
    const { models, seen } = observedModels(scenario, async () => {
      if (seen.executing >= 4) fourRunning.resolve();
      await Promise.race([fourRunning.promise, new Promise((r) => setTimeout(r, 10_000))]);
    });
    cluster = await startCluster({
      pods: 1,
      roles: ['planner', 'judge', 'replanner', 'coordinator'],
      models,
    });
    await cluster.startPod(['worker'], { concurrency: 4 });

    const reserve = 1500;
    const maxTokens = 7500;
    const session = await cluster.client.submit({
      instruction: 'Run the twelve parts',
      config: { budget: { maxTokens, reserveTokensPerCall: reserve } },
    });
    const view = await cluster.client.wait(session.id, { timeoutMs: TIMEOUT });
    expect(view.session.state).toBe('BUDGET_EXHAUSTED');
    expect(view.session.failure?.code).toBe('BUDGET_EXHAUSTED');
    expect(view.tasks.map((t) => t.state)).toEqual(ids.map(() => 'CANCELLED'));

    // Let calls still in flight settle before counting.
    const redis = new Redis(inject('redisUrl'));
    try {
      const usageStore = new UsageStore(redis, cluster.prefix);
      const usage = await eventually(async () => {
        const u = await usageStore.read(session.id);
        return u.reserved.tokens === 0 && seen.inFlight === 0 ? u : undefined;
      }, 'calls in flight to settle');

      // Planning fits and the four workers ran at once (a plan uses far less than 1500 tokens).
      expect(seen.maxExecuting).toBe(4);
      const used = usage.total.inputTokens + usage.total.outputTokens;
      const excess = Math.max(
        0,
        ...seen.usages.map((u) => u.inputTokens + u.outputTokens - reserve),
      );
      expect(excess).toBe(500);
      // The stated bound: limit + (calls in flight) × (actual − reserved).
      expect(used).toBeLessThanOrEqual(maxTokens + seen.maxInFlight * excess);
      // Each execution used 500 more than it reserved, so the limit is passed, within the bound.
      expect(used).toBeGreaterThan(maxTokens);
      // Every model call was granted first, and none was granted after the first refusal.
      expect(usage.exhausted).toEqual({ limit: 'tokens', afterGrants: usage.grants });
      expect(seen.calls).toBe(usage.grants);
      expect(usage.total.calls).toBe(seen.calls);
      expect(usage.denied).toBeGreaterThanOrEqual(1);
    } finally {
      redis.disconnect();
    }

    // Refused jobs fail once: BullMQ does not retry a budget refusal.
    const pod = cluster.pods[0];
    const failed = [
      ...(await pod!.queues.get('work').getFailed()),
      ...(await pod!.queues.get('judge').getFailed()),
    ];
    expect(failed.length).toBeGreaterThanOrEqual(1);
    for (const job of failed) {
      expect(job.failedReason).toMatch(/budget/);
      expect(job.attemptsMade).toBe(1);
    }

    const history = await historyOf(cluster.client, session.id);
    const stop = history.find(
      (e) => e.type === 'state_change' && e.entity === 'session' && e.to === 'BUDGET_EXHAUSTED',
    );
    expect(stop).toMatchObject({
      from: 'RUNNING',
      // The first refusal's event or a later one's, whichever the coordinator applied first.
      reason: expect.stringMatching(
        /^budget exhausted: .*(> maxTokens 7500|budget is already exhausted)/,
      ),
    });
    expect(history.some((e) => e.type === 'error' && e.code === 'BUDGET_EXHAUSTED')).toBe(true);
    expect(formatSessionTable(view)).toMatch(/budget: \d+ of 7500 tokens; exhausted \(tokens\)/);
  });
});

describe('a budget over real providers, with parallel workers', () => {
  const TASKS = 40;
  const maxTokens = 20_000;
  const plan = {
    summary: 'forty independent parts',
    tasks: Array.from({ length: TASKS }, (_, i) => ({
      id: `t${i + 1}`,
      title: `Part ${i + 1}`,
      acceptance: `part ${i + 1} is written`,
      dependencies: [],
    })),
  };
  const output = 'The part is written, with its tests and a note on what it leaves out. '.repeat(8);
  function answerFor(request: FakeLlmRequest): unknown {
    switch (request.schemaName) {
      case 'PlanBreakdown':
        return plan;
      case 'QualityJudgement':
        return { score: 90, isAcceptable: true, issues: [], suggestions: [] };
      case 'TaskOutput':
        return { output, log: '' };
      case 'TaskJudgement':
        return {
          success: true,
          shouldContinue: false,
          shouldReplan: false,
          reason: 'meets the criteria',
        };
      default:
        throw new Error(`no answer for ${request.schemaName}`);
    }
  }

  /**
   * The forty parts on four parallel workers, every role through `protocol` at `baseUrl` under
   * the budget (workers' calls capped at 300 output tokens): the session once it has ended, and
   * its usage once no call holds a reservation any more.
   */
  async function runFortyParts(options: {
    protocol: Protocol;
    baseUrl: string;
    model: string;
    attempts: number;
    provider?: Record<string, unknown>;
    llm?: Record<string, unknown>;
  }) {
    cluster = await startCluster({
      roles: ['planner', 'judge', 'replanner', 'coordinator'],
      config: { queues: { attempts: options.attempts } },
    });
    await cluster.startPod(['worker'], { concurrency: 4 });
    const session = await cluster.client.submit({
      instruction: 'Write the forty parts',
      config: {
        llm: {
          default: {
            provider: options.protocol,
            baseUrl: options.baseUrl,
            model: options.model,
            apiKeyEnv: 'BUDGET_TEST_KEY',
            maxOutputTokens: 300,
            ...options.provider,
          },
          planner: { maxOutputTokens: 2000 },
          ...options.llm,
        },
        // The default reserveTokensPerCall (4000) stands only for calls with no output limit.
        budget: { maxTokens },
      },
    });
    const view = await cluster.client.wait(session.id, { timeoutMs: 90_000 });
    const redis = new Redis(inject('redisUrl'));
    try {
      const usageStore = new UsageStore(redis, cluster.prefix);
      const usage = await eventually(async () => {
        const u = await usageStore.read(session.id);
        return u.reserved.tokens === 0 ? u : undefined;
      }, 'calls in flight to settle');
      const used = usage.total.inputTokens + usage.total.outputTokens;
      return { view, used, pod: cluster.pods[0]! };
    } finally {
      redis.disconnect();
    }
  }

  /**
   * What the server billed, as it counts it (the prompts it got and the JSON it answered), per
   * model: each case names its own, so a call of an earlier case still answered after it ended
   * is not billed to the next one.
   */
  const billed = new Map<string, number>();
  /** The model of one case; the server leaves usage out of its replies for `-no-usage`. */
  const modelOf = (protocol: Protocol, reports: boolean) =>
    `budget-${protocol}-${reports ? 'usage' : 'no-usage'}`;
  const servers = {} as Record<Protocol, FakeLlmServer>;
  beforeAll(async () => {
    process.env.BUDGET_TEST_KEY = 'sk-budget-test';
    const script = async (request: FakeLlmRequest): Promise<FakeReply> => {
      const model = String(request.body.model);
      // Answered a little late, as any server: the four workers' calls are in flight together,
      // so near the limit a call finds the room held by others (and waits) on any machine.
      await new Promise((r) => setTimeout(r, 25));
      const json = answerFor(request);
      const usage = {
        input: await countTokens(request.text),
        output: await countTokens(JSON.stringify(json)),
      };
      billed.set(model, (billed.get(model) ?? 0) + usage.input + usage.output);
      return { json, usage, noUsage: model.endsWith('-no-usage') };
    };
    servers.openai = await startFakeLlmServer('openai', script);
    servers.anthropic = await startFakeLlmServer('anthropic', script);
  });
  afterAll(() => Promise.all(Object.values(servers).map((s) => s.close())));

  it.each([
    ['openai', true],
    ['anthropic', true],
    ['anthropic', false],
    ['openai', false],
  ] as const)(
    'stops within 90 to 100 percent of maxTokens through the %s protocol (usage reported: %s)',
    async (protocol, reports) => {
      const model = modelOf(protocol, reports);
      // One attempt: a wait for budget room counted as a failed attempt would fail its task.
      const { view, used, pod } = await runFortyParts({
        protocol,
        baseUrl: servers[protocol].baseUrl,
        model,
        attempts: 1,
      });
      expect(view.session.state).toBe('BUDGET_EXHAUSTED');
      const done = view.tasks.filter((t) => t.state === 'DONE').length;
      expect(view.tasks.filter((t) => t.state !== 'DONE' && t.state !== 'CANCELLED')).toEqual([]);
      expect(done).toBeGreaterThanOrEqual(1);
      expect(done).toBeLessThan(TASKS);

      const redis = new Redis(inject('redisUrl'));
      try {
        // Stopped because the next call did not fit beside what was used, not while calls in
        // flight held the room: those were waited for (their jobs handed back).
        expect(used).toBeGreaterThanOrEqual(0.9 * maxTokens);
        expect(used).toBeLessThanOrEqual(maxTokens);
        const atServer = billed.get(model) ?? 0;
        expect(atServer).toBeLessThanOrEqual(maxTokens);
        if (reports) expect(atServer).toBeGreaterThanOrEqual(0.9 * maxTokens);
        const waits = await redis.hget(pod.store.keys(view.session.id).usage, 'budget_waits');
        expect(Number(waits)).toBeGreaterThanOrEqual(1);
        // Those calls were handed back to wait, not failed: only the final refusal fails jobs.
        const failed = [
          ...(await pod.queues.get('work').getFailed()),
          ...(await pod.queues.get('judge').getFailed()),
        ];
        for (const job of failed) expect(job.failedReason).toMatch(/budget is already|> maxTokens/);
        for (const job of failed) expect(job.failedReason).not.toMatch(/waiting for budget/);
        // Each refusal is true of what was used alone: a call refused while room was only held
        // by calls in flight (which should have waited for them) would say otherwise.
        const refusals = failed.flatMap((job) => {
          const m = /(\d+) used \+ (\d+) > maxTokens (\d+)/.exec(job.failedReason);
          return m ? [m.slice(1).map(Number) as [number, number, number]] : [];
        });
        expect(refusals.length).toBeGreaterThanOrEqual(1);
        for (const [used, estimate, max] of refusals) expect(used + estimate).toBeGreaterThan(max);
      } finally {
        redis.disconnect();
      }
    },
    120_000,
  );

  it.each(['openai', 'anthropic'] as const)(
    'keeps its budget through the %s protocol with flaky, slow, fenced, invalid and usage-less replies',
    async (protocol) => {
      // Every 7th request a 500 (the SDK tries again), every 5th off the schema (a repair turn), every
      // 3rd fenced, every other one without usage, each 20 ms late.
      let n = 0;
      let chaosBilled = 0;
      const server = await startFakeLlmServer(protocol, async (request): Promise<FakeReply> => {
        // This request's own number, taken before any await: requests overlap.
        n += 1;
        const k = n;
        await new Promise((r) => setTimeout(r, 20));
        if (k % 7 === 0) return { status: 500 };
        const input = await countTokens(request.text);
        if (k % 5 === 0 && !request.followUp) {
          // An answer that misses the schema, billed as the server counts it.
          const json = { note: 'Here is what I would do, in a few words.' };
          const output = await countTokens(JSON.stringify(json));
          chaosBilled += input + output;
          return { json, usage: { input, output }, noUsage: k % 2 === 0 };
        }
        const json = answerFor(request);
        const output = await countTokens(JSON.stringify(json));
        chaosBilled += input + output;
        return {
          json,
          usage: { input, output },
          noUsage: k % 2 === 0,
          ...(k % 3 === 0 ? { wrap: 'fence' as const } : {}),
        };
      });
      try {
        const { view, used } = await runFortyParts({
          protocol,
          baseUrl: server.baseUrl,
          model: 'test',
          attempts: 3,
          provider: { maxRetries: 3 },
          llm: { maxRepairAttempts: 2 },
        });
        expect(view.session.state).toBe('BUDGET_EXHAUSTED');
        // Repair turns happened, and the budget held both in orq's count and the server's.
        expect(server.requests.some((r) => r.followUp)).toBe(true);
        expect(used).toBeLessThanOrEqual(maxTokens);
        expect(chaosBilled).toBeLessThanOrEqual(maxTokens);
      } finally {
        await server.close();
      }
    },
    120_000,
  );
});

/**
 * What a model call of the session refused by its budget leaves: the usage's sticky mark and
 * the job-failed event its coordinator stops the session on.
 */
async function refuseOnBudget(pod: TestCluster['pods'][number], sessionId: string) {
  await pod.store.redis.hset(pod.store.keys(sessionId).usage, 'exhausted', 'tokens');
  await pod.queues.add(
    outboxJob('coordinator', 'job-failed', `refusal|${sessionId}`, {
      sessionId,
      role: 'judge',
      jobId: 'refused',
      error: 'cannot reserve its estimate',
      code: 'BUDGET_EXHAUSTED',
    }),
  );
}

/** A plan of `ids` that depend on nothing, accepted at once. */
function independentScenario(ids: string[]): ScenarioInput {
  return {
    plans: [{ tasks: ids.map((id) => ({ id, title: `Step ${id}`, acceptance: `${id} done` })) }],
    planJudgements: [{ score: 90, isAcceptable: true }],
  };
}

/** A plan of `ids` in a chain, each execution reporting 400 + 100 tokens. */
function chainScenario(ids: string[]): ScenarioInput {
  return {
    plans: [
      {
        tasks: ids.map((id, i) => ({
          id,
          title: `Step ${id}`,
          acceptance: `${id} done`,
          context: 'c',
          ...(i > 0 ? { dependencies: [ids[i - 1] as string] } : {}),
        })),
      },
    ],
    planJudgements: [{ score: 90, isAcceptable: true }],
    tasks: Object.fromEntries(
      ids.map((id) => [id, { results: [{ tokenUsage: { inputTokens: 400, outputTokens: 100 } }] }]),
    ),
  };
}

/**
 * Builtin models whose planner and plan judge report 100 tokens a call (so the tests can place a
 * budget stop between them), noting the attempt and feedback of each plan call.
 */
function planningAt100Tokens(scenario: ScenarioInput) {
  const inner = createBuiltinModels({ scenario });
  const usage = { inputTokens: 80, outputTokens: 20 };
  const planCalls: { attempt: number; feedback: unknown }[] = [];
  const models: RoleModels = {
    ...inner,
    plan: async (r) => {
      planCalls.push({ attempt: r.attempt, feedback: r.feedback });
      return { ...(await inner.plan(r)), usage };
    },
    judgePlan: async (r) => ({ ...(await inner.judgePlan(r)), usage }),
  };
  return { models, planCalls };
}

describe('resuming a session its budget stopped', () => {
  it('goes on with a higher limit: the cancelled tasks run, the done ones do not run again', async () => {
    const ids = ['a', 'b', 'c', 'd', 'e', 'f'];
    // A chain, so the budget stops it part-way with done tasks behind it.
    const path = scenarios.write('budget-resume', chainScenario(ids));
    cluster = await startCluster();
    const { client } = cluster;
    const session = await client.submit({
      instruction: 'Run the six steps',
      config: { llm: { scenario: path }, budget: { maxTokens: 2500, reserveTokensPerCall: 600 } },
    });
    const stopped = await client.wait(session.id, { timeoutMs: TIMEOUT });
    expect(stopped.session.state).toBe('BUDGET_EXHAUSTED');
    const doneBefore = stopped.tasks.filter((t) => t.state === 'DONE').map((t) => t.id);
    expect(doneBefore.length).toBeGreaterThanOrEqual(1);
    expect(stopped.tasks.filter((t) => t.state === 'CANCELLED').length).toBeGreaterThanOrEqual(1);
    const used = stopped.usage.total.inputTokens + stopped.usage.total.outputTokens;

    // Without a budget, or with one that leaves no room for a call, the resume is refused.
    await expect(client.resume(session.id)).rejects.toMatchObject({
      code: 'INVALID_STATE',
      message: expect.stringMatching(/resumes only with a higher budget/),
    });
    await expect(
      client.resume(session.id, { budget: { maxTokens: used + 100 } }),
    ).rejects.toMatchObject({
      code: 'INVALID_STATE',
      message: expect.stringMatching(/less than one call's reservation \(600\)/),
    });

    await client.resume(session.id, { budget: { maxTokens: 1_000_000 } });
    const view = await client.wait(session.id, { timeoutMs: TIMEOUT });
    expect(view.session.state).toBe('COMPLETED');
    expect(view.session.failure).toBeUndefined();
    expect(view.session.config.budget.maxTokens).toBe(1_000_000);
    expect(view.tasks.map((t) => t.state)).toEqual(ids.map(() => 'DONE'));
    expect(view.usage.exhausted).toBeUndefined();

    const history = await historyOf(client, session.id);
    for (const id of doneBefore) expect(executionsOf(history, id)).toHaveLength(1);
    expect(history).toContainEqual(
      expect.objectContaining({
        type: 'state_change',
        entity: 'session',
        from: 'BUDGET_EXHAUSTED',
        to: 'RUNNING',
        reason: 'resumed with a higher budget (maxTokens 1000000)',
      }),
    );
    expect(decisions(history, 'resume:budget')).toHaveLength(1);
  });

  it('ignores a refusal from before the raise that arrives after it', async () => {
    const ids = ['a', 'b', 'c'];
    const scenario = chainScenario(ids);
    // After the resume, executions wait until the stale refusal has been handled.
    let resumed = false;
    const handled = deferred();
    const { models } = observedModels(scenario, async () => {
      if (resumed) await handled.promise;
    });
    cluster = await startCluster({ models });
    const { client } = cluster;
    const session = await client.submit({
      instruction: 'Run the three steps',
      config: { budget: { maxTokens: 2000, reserveTokensPerCall: 600 } },
    });
    expect((await client.wait(session.id, { timeoutMs: TIMEOUT })).session.state).toBe(
      'BUDGET_EXHAUSTED',
    );
    resumed = true;
    await client.resume(session.id, { budget: { maxTokens: 1_000_000 } });
    expect((await client.get(session.id)).session.state).toBe('RUNNING');

    // A refusal reported late (a backlog of coordinator events, say) from before the resume.
    await cluster.pods[0]?.queues.add(
      outboxJob('coordinator', 'job-failed', `stale-refusal|${session.id}`, {
        sessionId: session.id,
        role: 'worker',
        jobId: 'an-old-job',
        error: 'the token budget is already exhausted',
        code: 'BUDGET_EXHAUSTED',
      }),
    );
    await eventually(async () => {
      const ignored = decisions(await historyOf(client, session.id), 'event:ignored');
      return ignored.find(
        (d) => d.reason === 'job-failed: the budget was raised after this refusal',
      );
    }, 'the late refusal recorded as ignored');
    expect((await client.get(session.id)).session.state).toBe('RUNNING');
    handled.resolve();
    expect((await client.wait(session.id, { timeoutMs: TIMEOUT })).session.state).toBe('COMPLETED');
  });

  it('runs the resumed tasks on a pod where calls the budget stopped have not returned yet', async () => {
    const inner = createBuiltinModels({ scenario: independentScenario(['a', 'b']) });
    const firstAttempts = deferred();
    let started = 0;
    const models: RoleModels = {
      ...inner,
      // The first executions do not heed the abort at once (a provider or tool slow to stop).
      async execute(request) {
        if (request.attempt === 1) {
          started += 1;
          await firstAttempts.promise;
        }
        return inner.execute(request);
      },
    };
    cluster = await startCluster({ models, cancelPollMs: 100 });
    const { client, pods } = cluster;
    const session = await client.submit({
      instruction: 'Run the two steps',
      config: { budget: { maxTokens: 1_000_000, reserveTokensPerCall: 100 } },
    });
    await eventually(() => (started === 2 ? true : undefined), 'both first executions running');
    const pod = pods[0] as (typeof pods)[number];
    await refuseOnBudget(pod, session.id);
    expect((await client.wait(session.id, { timeoutMs: TIMEOUT })).session.state).toBe(
      'BUDGET_EXHAUSTED',
    );
    // Resumed while the stopped executions still hold their session's abort signal.
    await client.resume(session.id, { budget: { maxTokens: 2_000_000 } });
    await new Promise((r) => setTimeout(r, 500));
    firstAttempts.resolve();
    const view = await client.wait(session.id, { timeoutMs: TIMEOUT });
    expect(view.session.state).toBe('COMPLETED');
    expect(view.tasks.map((t) => [t.id, t.state, t.attempts])).toEqual([
      ['a', 'DONE', 2],
      ['b', 'DONE', 2],
    ]);
  });

  it('cancels a resumed session even if an earlier cancel met it stopped by its budget', async () => {
    const inner = createBuiltinModels({ scenario: independentScenario(['a']) });
    const hold = deferred();
    const models: RoleModels = {
      ...inner,
      async execute(request) {
        await hold.promise;
        return inner.execute(request);
      },
    };
    // One coordinator job at a time: the events below apply in the order they were queued.
    cluster = await startCluster({ models, config: { concurrency: { coordinator: 1 } } });
    const { client, pods } = cluster;
    const pod = pods[0] as (typeof pods)[number];
    const session = await client.submit({
      instruction: 'Run the step',
      config: { budget: { maxTokens: 1_000_000, reserveTokensPerCall: 100 } },
    });
    await eventually(async () => {
      const view = await client.get(session.id);
      return view.tasks[0]?.state === 'RUNNING' ? true : undefined;
    }, 'the task running');
    // The budget stop and a cancel the user sent while the session still ran, in that order.
    const events = pod.queues.get('coordinator');
    await events.pause();
    await refuseOnBudget(pod, session.id);
    await client.cancel(session.id, 'first cancel');
    await events.resume();
    await eventually(async () => {
      const ignored = decisions(await historyOf(client, session.id), 'event:ignored');
      return ignored.find((d) =>
        d.reason.startsWith('cancel: session is already BUDGET_EXHAUSTED'),
      );
    }, 'the first cancel ignored');

    await client.resume(session.id, { budget: { maxTokens: 2_000_000 } });
    await client.cancel(session.id, 'second cancel');
    const view = await client.wait(session.id, { timeoutMs: TIMEOUT });
    hold.resolve();
    expect(view.session.state).toBe('CANCELLED');
  });

  it('plans again with a higher limit when the budget stopped it while the plan was judged', async () => {
    const { models, planCalls } = planningAt100Tokens(chainScenario(['a', 'b']));
    cluster = await startCluster({ models });
    const { client } = cluster;
    // The planner's reservation (300) fits in 350; the plan judge's (100 used + 300) does not.
    const session = await client.submit({
      instruction: 'Run the two steps',
      config: { budget: { maxTokens: 350, reserveTokensPerCall: 300 } },
    });
    const stopped = await client.wait(session.id, { timeoutMs: TIMEOUT });
    expect(stopped.session.state).toBe('BUDGET_EXHAUSTED');
    expect(stopped.tasks).toEqual([]);
    await expect(client.resume(session.id, { budget: { maxTokens: 350 } })).rejects.toMatchObject({
      code: 'INVALID_STATE',
      message: expect.stringMatching(/less than one call's reservation \(300\)/),
    });

    await client.resume(session.id, { budget: { maxTokens: 100_000 } });
    const view = await client.wait(session.id, { timeoutMs: TIMEOUT });
    expect(view.session.state).toBe('COMPLETED');
    expect(view.session.failure).toBeUndefined();
    expect(view.tasks.map((t) => t.state)).toEqual(['DONE', 'DONE']);
    expect(view.usage.exhausted).toBeUndefined();
    // The interrupted attempt 0 is never judged: the plan is made again as attempt 1.
    expect(planCalls.map((c) => c.attempt)).toEqual([0, 1]);
    expect(view.session.planning.attempt).toBe(1);
    const history = await historyOf(client, session.id);
    expect(decisions(history, 'resume:budget')).toEqual([
      expect.objectContaining({
        reason: 'resumed with a higher budget (maxTokens 100000)',
        inputs: expect.objectContaining({ interruptedPlanAttempt: 0, planAttempt: 1 }),
      }),
    ]);
    expect(history).toContainEqual(
      expect.objectContaining({
        type: 'state_change',
        entity: 'session',
        from: 'BUDGET_EXHAUSTED',
        to: 'PLANNING',
      }),
    );
    expect(history.filter((e) => e.type === 'judgement' && e.subject === 'plan')).toHaveLength(1);
  });

  it('plans again with the last feedback when the budget stopped a replan', async () => {
    const scenario: ScenarioInput = {
      ...chainScenario(['a', 'b']),
      planJudgements: [
        {
          score: 40,
          isAcceptable: false,
          issues: ['covers only parsing'],
          suggestions: ['add a test step'],
        },
        { score: 90, isAcceptable: true },
      ],
    };
    const { models, planCalls } = planningAt100Tokens(scenario);
    cluster = await startCluster({ models });
    const { client } = cluster;
    // Plan (300 reserved) and judge (100 + 300) fit in 450; the replan (200 + 300) does not.
    const session = await client.submit({
      instruction: 'Run the two steps',
      config: { budget: { maxTokens: 450, reserveTokensPerCall: 300 } },
    });
    const stopped = await client.wait(session.id, { timeoutMs: TIMEOUT });
    expect(stopped.session.state).toBe('BUDGET_EXHAUSTED');
    expect(stopped.session.planning).toMatchObject({ attempt: 1, attemptCount: 1 });
    expect(planCalls.map((c) => c.attempt)).toEqual([0]);

    await client.resume(session.id, { budget: { maxTokens: 100_000 } });
    const view = await client.wait(session.id, { timeoutMs: TIMEOUT });
    expect(view.session.state).toBe('COMPLETED');
    const feedback = { issues: ['covers only parsing'], suggestions: ['add a test step'] };
    expect(planCalls).toEqual([
      { attempt: 0, feedback: undefined },
      { attempt: 2, feedback },
    ]);
    // The interruption is no replan: seed 000's attempt count stays at the one replan made.
    expect(view.session.planning).toMatchObject({ attempt: 2, attemptCount: 1 });
    expect(decisions(await historyOf(client, session.id), 'resume:budget')).toEqual([
      expect.objectContaining({
        inputs: expect.objectContaining({ interruptedPlanAttempt: 1, planAttempt: 2 }),
      }),
    ]);
  });

  it('refuses a budget for a session the budget did not stop', async () => {
    cluster = await startCluster();
    const { client } = cluster;
    const session = await client.submit({ instruction: 'Write the parser' });
    await client.wait(session.id, { timeoutMs: TIMEOUT });
    await expect(client.resume(session.id, { budget: { maxTokens: 10 } })).rejects.toMatchObject({
      code: 'INVALID_STATE',
    });
  });
});

describe('judge samples', () => {
  it('decide on the median of k scores, with samples and spread in history, under the noise threshold', async () => {
    const scenario = scenarios.write('noisy-judge', {
      planJudgements: [
        // Attempt 0: one outlier says 92 and acceptable; the median (60) and the majority say no.
        [
          { score: 55, isAcceptable: false, issues: ['too coarse'] },
          { score: 92, isAcceptable: true },
          { score: 60, isAcceptable: false, issues: ['no tests planned'] },
        ],
        // Attempt 1: median 62 is within noiseThreshold (3) of 60: stagnation, not progress.
        [
          { score: 62, isAcceptable: false, issues: ['still no tests'] },
          { score: 95, isAcceptable: true },
          { score: 58, isAcceptable: false },
        ],
      ],
    });
    cluster = await startCluster();
    const session = await cluster.client.submit({
      instruction: 'Write the parser and add the tests',
      config: { llm: { scenario, judgeSamples: { k: 3 } } },
    });
    const view = await cluster.client.wait(session.id, { timeoutMs: TIMEOUT });
    expect(view.session.state).toBe('FAILED');
    expect(view.usage.byRole.judge?.calls).toBe(6);

    const history = await historyOf(cluster.client, session.id);
    const judgements = history.filter((e) => e.type === 'judgement' && e.subject === 'plan');
    expect(judgements.map((e) => e.type === 'judgement' && e.judgement)).toEqual([
      {
        score: 60,
        isAcceptable: false,
        issues: ['no tests planned'],
        suggestions: [],
        samples: [55, 92, 60],
        spread: 37,
      },
      {
        score: 62,
        isAcceptable: false,
        issues: ['still no tests'],
        suggestions: [],
        samples: [62, 95, 58],
        spread: 37,
      },
    ]);
    const [replan] = decisions(history, 'refinement:replan');
    expect(replan?.inputs).toMatchObject({ score: 60, issues: ['no tests planned'] });
    const [reject] = decisions(history, 'refinement:reject');
    expect(reject?.inputs).toMatchObject({
      score: 62,
      previousScore: 60,
      scoreDirection: 'stable',
    });
    expect(reject?.inputs).toMatchObject({ reasonCode: 'stagnation_noise' });
  });

  it('adaptive: ask the judge again only near the acceptance score, with every extra call and its reason in history', async () => {
    const scenario = scenarios.write('adaptive-judge', {
      planJudgements: [
        // Attempt 0: 72 is within the margin of 70; the next two take the mean below it.
        [
          { score: 72, isAcceptable: true },
          { score: 60, isAcceptable: false, issues: ['no tests planned'] },
          { score: 62, isAcceptable: false, issues: ['still no tests'] },
        ],
        // Attempt 1 (the replan): far above 70, one call.
        { score: 90, isAcceptable: true },
      ],
    });
    cluster = await startCluster();
    const session = await cluster.client.submit({
      instruction: 'Write the parser and add the tests',
      config: { llm: { scenario, judgeSamples: { mode: 'adaptive' } } },
    });
    const view = await cluster.client.wait(session.id, { timeoutMs: TIMEOUT });
    expect(view.session.state).toBe('COMPLETED');
    expect(view.usage.byRole.judge?.calls).toBeGreaterThanOrEqual(4);

    const history = await historyOf(cluster.client, session.id);
    const judgements = history.flatMap((e) =>
      e.type === 'judgement' && e.subject === 'plan' ? [e.judgement] : [],
    );
    expect(judgements).toHaveLength(2);
    const [first, second] = judgements;
    expect(first).toMatchObject({ score: 65, isAcceptable: false, samples: [72, 60, 62] });
    expect(first && 'adaptive' in first ? first.adaptive : undefined).toMatchObject({
      extraCalls: [
        { call: 2, reason: expect.stringMatching(/mean score 72 of 1 call.*acceptance score 70/) },
        { call: 3, reason: expect.stringMatching(/mean score 66 of 2 calls.*acceptance score 70/) },
      ],
      stopped: expect.stringMatching(/no line that changes the decision/),
    });
    expect(second).toMatchObject({ score: 90, samples: [90], adaptive: { extraCalls: [] } });
    // The first plan's two repeats were kept in Redis for this judge: the second plan's σ is
    // learned from them (learnNoise, on by default).
    expect(first && 'adaptive' in first ? first.adaptive?.prior : undefined).toEqual({
      sigma: 7.5,
      learnedFrom: 0,
    });
    expect(second && 'adaptive' in second ? second.adaptive?.prior : undefined).toMatchObject({
      learnedFrom: 2,
    });
    const [replan] = decisions(history, 'refinement:replan');
    expect(replan?.inputs).toMatchObject({ score: 65 });
  });

  it('confirmTaskVerdicts: a blocked verdict a second and third opinion overturn does not block the task', async () => {
    const scenario = scenarios.write('confirmed-verdicts', {
      plans: [
        {
          tasks: [{ id: 't1', title: 'Write the parser', acceptance: 'parses', context: 'c' }],
        },
      ],
      planJudgements: [{ score: 90, isAcceptable: true }],
      tasks: {
        t1: {
          judgements: [
            [
              { success: false, shouldContinue: false, shouldReplan: false, reason: 'hopeless' },
              { success: false, shouldContinue: true, shouldReplan: false, reason: 'add tests' },
              { success: false, shouldContinue: true, shouldReplan: false, reason: 'tests' },
            ],
            { success: true, shouldContinue: false, shouldReplan: false, reason: 'done' },
          ],
        },
      },
    });
    cluster = await startCluster();
    const session = await cluster.client.submit({
      instruction: 'Write the parser',
      config: { llm: { scenario, judgeSamples: { confirmTaskVerdicts: ['replan', 'blocked'] } } },
    });
    const view = await cluster.client.wait(session.id, { timeoutMs: TIMEOUT, until: 'settled' });
    expect(view.session.state).toBe('COMPLETED');
    expect(view.tasks.map((t) => [t.id, t.state, t.attempts])).toEqual([['t1', 'DONE', 2]]);
    // One plan judgement, three opinions on the first execution, one on the second.
    expect(view.usage.byRole.judge?.calls).toBe(5);
    const history = await historyOf(cluster.client, session.id);
    const verdicts = history.flatMap((e) =>
      e.type === 'judgement' && e.subject === 'task' ? [e.judgement] : [],
    );
    expect(verdicts).toHaveLength(2);
    expect(verdicts[0]).toMatchObject({
      shouldContinue: true,
      reason: 'add tests',
      confirmation: {
        verdicts: ['blocked', 'continue', 'continue'],
        reason: 'blocked, continue, continue: continue by majority',
      },
    });
    expect(verdicts[1]).not.toHaveProperty('confirmation');
  });
});
