import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { createServer, type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { parseConfig } from '../../src/shared/config/load.js';
import type { HistoryEntry } from '../../src/shared/domain/history.js';
import { QualityJudgementAnswer } from '../../src/shared/domain/plan.js';
import type { Task } from '../../src/shared/domain/task.js';
import { createAnthropicProvider } from '../../src/workers/llm/anthropic-provider.js';
import { DEFAULT_ANTHROPIC_MAX_TOKENS, sessionRoleConfigs } from '../../src/shared/config/roles.js';
import {
  isPermanentCallFailure,
  usageOfFailure,
  type ChatProvider,
  type ChatRequest,
} from '../../src/workers/llm/chat.js';
import { OrqError } from '../../src/shared/errors.js';
import { createLlmModels } from '../../src/workers/llm/llm-models.js';
import { createOpenAiProvider } from '../../src/workers/llm/openai-provider.js';
import { callStructured } from '../../src/workers/llm/structured.js';
import { routeProviderWarnings } from '../../src/workers/llm/provider-warnings.js';
import { countTokens } from '../../src/workers/llm/token-estimate.js';
import { startCluster, type TestCluster } from '../support/cluster.js';
import {
  FAKE_USAGE,
  startFakeLlmServer,
  type FakeLlmRequest,
  type FakeLlmServer,
  type FakeReply,
  type Protocol,
} from '../support/fake-llm-server.js';
import { decisions, eventually, executionsOf, historyOf } from '../support/scenarios.js';

/**
 * Real providers (the official SDKs) against real HTTP servers on 127.0.0.1 that speak the
 * OpenAI chat-completions and the Anthropic messages protocols. The servers answer by the
 * schema a request asks for (which tells the role) and by a marker in the instruction (which
 * tells the test), so many sessions share one cluster and one server per protocol.
 */

const WAIT = { timeoutMs: 25_000 };
const KEY = 'sk-orq-test';

const plan = {
  summary: 'schema first, then the API',
  tasks: [
    {
      id: 't1',
      title: '認証 schema',
      acceptance: 'the users table has email and password_hash columns',
      context: 'PostgreSQL; the API of t2 reads this table',
      scopePaths: ['db/schema.sql'],
      dependencies: [],
    },
    {
      id: 't2',
      title: 'バリデーション and login API',
      acceptance: 'POST /login validates its input and returns a JWT',
      context: 'Reads the users table of t1',
      scopePaths: ['src/api/login.ts'],
      dependencies: ['t1'],
    },
  ],
};
const goodJudgement = { score: 90, isAcceptable: true, issues: [], suggestions: [] };
const replanVerdict = {
  success: false,
  shouldContinue: false,
  shouldReplan: true,
  reason: 'The login API is too large for one pass',
  missingRequirements: ['input バリデーション', 'JWT signing'],
};
const subtasks = {
  reason: 'validation, signing and the endpoint separately',
  tasks: [
    { id: 's1', title: 'バリデーション of login input', acceptance: 'bad input gets 400' },
    { id: 's2', title: 'JWT signing', acceptance: 'tokens verify' },
    { id: 's3', title: 'login endpoint', acceptance: 'returns a JWT', dependencies: ['s1', 's2'] },
  ],
};

/** The task id and execution number a worker or task-judge prompt is about. */
const taskOf = (request: FakeLlmRequest) => /\(id `([^`]+)`, execution (\d+)\)/.exec(request.text);

/** The scripted model: a valid answer for every role; `[replan]` makes t2 get replanned. */
function happyReply(request: FakeLlmRequest): FakeReply {
  switch (request.schemaName) {
    case 'PlanBreakdown':
      return { json: plan };
    case 'QualityJudgement':
      return { json: goodJudgement };
    case 'TaskOutput': {
      const id = taskOf(request)?.[1] ?? '?';
      return { json: { output: `deliverable of ${id}`, log: `worker log of ${id}: wrote it` } };
    }
    case 'TaskJudgement': {
      const [, id, execution] = taskOf(request) ?? [];
      if (request.text.includes('[replan]') && id === 't2' && execution === '1') {
        return { json: replanVerdict };
      }
      return {
        json: {
          success: true,
          shouldContinue: false,
          shouldReplan: false,
          reason: 'meets the criteria',
        },
      };
    }
    case 'ReplanBreakdown':
      return { json: subtasks };
    default:
      return { status: 400 };
  }
}

/** Per-marker behaviour of a test; requests without a registered marker get happyReply. */
const behaviours = new Map<string, (request: FakeLlmRequest) => FakeReply>();
function script(request: FakeLlmRequest): FakeReply {
  for (const [marker, behaviour] of behaviours) {
    if (request.text.includes(marker)) return behaviour(request);
  }
  return happyReply(request);
}

let cluster: TestCluster;
const servers = {} as Record<Protocol, FakeLlmServer>;
const tempDirs: string[] = [];

beforeAll(async () => {
  process.env.TEST_KEY = KEY;
  servers.openai = await startFakeLlmServer('openai', script);
  servers.anthropic = await startFakeLlmServer('anthropic', script);
  cluster = await startCluster({ config: { queues: { attempts: 2, backoffMs: 50 } } });
});

afterAll(async () => {
  await cluster?.close();
  await Promise.all(Object.values(servers).map((s) => s.close()));
  for (const dir of tempDirs) rmSync(dir, { recursive: true, force: true });
});

function llmConfig(server: Pick<FakeLlmServer, 'protocol' | 'baseUrl'>, llm = {}) {
  return {
    llm: {
      default: {
        provider: server.protocol,
        baseUrl: server.baseUrl,
        model: 'test',
        apiKeyEnv: 'TEST_KEY',
        timeoutSeconds: 20,
      },
      ...llm,
    },
  };
}

async function runSession(
  instruction: string,
  server: Pick<FakeLlmServer, 'protocol' | 'baseUrl'>,
  llm = {},
  config: Record<string, unknown> = {},
) {
  const session = await cluster.client.submit({
    instruction,
    config: { ...config, ...llmConfig(server, llm) },
  });
  const view = await cluster.client.wait(session.id, WAIT);
  return { id: session.id, view, history: await historyOf(cluster.client, session.id) };
}

const requestsWith = (server: FakeLlmServer, marker: string, schemaName?: string) =>
  server.requests.filter(
    (r) => r.text.includes(marker) && (!schemaName || r.schemaName === schemaName),
  );

const errorsOf = (history: HistoryEntry[]) =>
  history.filter((e): e is Extract<HistoryEntry, { type: 'error' }> => e.type === 'error');

const byId = (tasks: Task[], id: string) => tasks.find((t) => t.id === id);

describe.each(['openai', 'anthropic'] as const)('a whole session through the %s protocol', (p) => {
  it('plans, judges, executes, replans a task and completes, with the seeds in the prompts', async () => {
    const marker = `[replan] ${p}`;
    const server = servers[p];
    const { view, history } = await runSession(
      `${marker} 認証機能とバリデーションを実装して`,
      server,
    );

    expect(view.session.state).toBe('COMPLETED');
    expect(byId(view.tasks, 't1')?.state).toBe('DONE');
    expect(byId(view.tasks, 't2')?.state).toBe('REPLACED_BY_REPLAN');
    const replacements = view.tasks.filter((t) => t.replanningInfo?.originalTaskId === 't2');
    expect(replacements.map((t) => t.state)).toEqual(['DONE', 'DONE', 'DONE']);
    expect(byId(view.tasks, 't1')?.result?.output).toBe('deliverable of t1');

    // Every role went through the protocol, with the key from the environment.
    const seen = new Set(requestsWith(server, marker).map((r) => r.schemaName));
    expect([...seen].sort()).toEqual([
      'PlanBreakdown',
      'QualityJudgement',
      'ReplanBreakdown',
      'TaskJudgement',
      'TaskOutput',
    ]);
    const first = requestsWith(server, marker)[0];
    if (p === 'openai') {
      expect(first?.headers.authorization).toBe(`Bearer ${KEY}`);
      const format = first?.body.response_format as { type: string; json_schema: object };
      expect(format).toMatchObject({
        type: 'json_schema',
        json_schema: { name: 'PlanBreakdown', strict: true },
      });
    } else {
      // This SDK sends the key as a bearer token; older ones used x-api-key.
      const sent = first?.headers['x-api-key'] ?? first?.headers.authorization;
      expect([KEY, `Bearer ${KEY}`]).toContain(sent);
      // JSON outputs, not a forced tool: current Claude models answer 400 to tool_choice tool.
      expect(first?.body).not.toHaveProperty('tool_choice');
      expect(first?.body).not.toHaveProperty('tools');
      const format = (first?.body.output_config as { format: Record<string, unknown> }).format;
      expect(format).toMatchObject({
        type: 'json_schema',
        schema: { title: 'PlanBreakdown', type: 'object', additionalProperties: false },
      });
    }

    // Seed 002: the planner is told the required terms. Seed 001: the replanner gets the
    // original task, the worker's log, the judge's verdict and the policy to split it.
    const planner = requestsWith(server, marker, 'PlanBreakdown')[0];
    expect(planner?.text).toContain('「認証」');
    expect(planner?.text).toContain('「バリデーション」');
    const replanner = requestsWith(server, marker, 'ReplanBreakdown')[0];
    const original = plan.tasks[1];
    for (const expected of [
      original?.acceptance,
      original?.context,
      '`src/api/login.ts`',
      'worker log of t2: wrote it',
      replanVerdict.reason,
      '- input バリデーション\n- JWT signing',
      '3 to 5 tasks',
      'Dependencies only among the new tasks',
    ]) {
      expect(replanner?.text).toContain(expected);
    }

    // The worker's usage is what the server billed, and lands in the execution history.
    expect(executionsOf(history, 't1')[0]?.result.tokenUsage).toEqual({
      inputTokens: FAKE_USAGE.input,
      outputTokens: FAKE_USAGE.output,
    });
  });

  it('a 429 is retried by the SDK and the session completes', async () => {
    const marker = `[rate-limited] ${p}`;
    const server = servers[p];
    let limited = false;
    behaviours.set(marker, (request) => {
      if (request.schemaName === 'PlanBreakdown' && !limited) {
        limited = true;
        return { status: 429, retryAfterMs: 20 };
      }
      return happyReply(request);
    });
    const { view, history } = await runSession(`${marker} build it`, server);
    expect(view.session.state).toBe('COMPLETED');
    expect(requestsWith(server, marker, 'PlanBreakdown')).toHaveLength(2);
    expect(errorsOf(history)).toEqual([]);
  });

  it('parses replies in ```json fences and replies with prose around the JSON', async () => {
    const marker = `[wrapped] ${p}`;
    const server = servers[p];
    behaviours.set(marker, (request) => {
      const reply = happyReply(request);
      if (!('json' in reply)) return reply;
      const fenced = request.schemaName === 'PlanBreakdown' || request.schemaName === 'TaskOutput';
      return { json: reply.json, wrap: fenced ? 'fence' : 'prose' };
    });
    const { view } = await runSession(`${marker} build it`, server);
    expect(view.session.state).toBe('COMPLETED');
    expect(byId(view.tasks, 't2')?.result?.output).toBe('deliverable of t2');
    expect(requestsWith(server, marker).filter((r) => r.followUp)).toEqual([]);
  });
});

describe('required terms in the prompts', () => {
  it("keeps the user's spelling of English terms in the planner's prompt and in the history", async () => {
    const marker = '[terms-case]';
    const server = servers.openai;
    const { view, history } = await runSession(`${marker} Add JWT login to the REST API`, server);
    expect(view.session.state).toBe('COMPLETED');
    const planner = requestsWith(server, marker, 'PlanBreakdown')[0];
    expect(planner?.text).toContain('「JWT」');
    expect(planner?.text).toContain('「REST」');
    expect(planner?.text).not.toContain('「jwt」');
    const [extracted] = decisions(history, 'terms:extracted');
    expect(extracted?.reason).toMatch(/^required terms: JWT, REST, API, /);
  });
});

describe('structured output repair', () => {
  const invalidPlan = { tasks: [{ id: 't1', title: 'no acceptance criteria' }] };

  it('an invalid reply gets one repair request with the validation error, then succeeds', async () => {
    const marker = '[repair-once]';
    const server = servers.openai;
    behaviours.set(marker, (request) =>
      request.schemaName === 'PlanBreakdown' && !request.followUp
        ? { json: invalidPlan }
        : happyReply(request),
    );
    const { view } = await runSession(`${marker} build it`, server);
    expect(view.session.state).toBe('COMPLETED');

    const planRequests = requestsWith(server, marker, 'PlanBreakdown');
    expect(planRequests).toHaveLength(2);
    const repair = planRequests[1];
    expect(repair?.messages.map((m) => m.role)).toEqual(['user', 'assistant', 'user']);
    expect(JSON.parse(repair?.messages[1]?.content ?? '')).toEqual(invalidPlan);
    expect(repair?.messages[2]?.content).toContain('PlanBreakdown');
    expect(repair?.messages[2]?.content).toContain('tasks.0.acceptance');
  });

  it('a reply invalid twice fails the job, and the history names the schema and the field', async () => {
    const marker = '[always-invalid]';
    const server = servers.anthropic;
    behaviours.set(marker, (request) =>
      request.schemaName === 'PlanBreakdown' ? { json: invalidPlan } : happyReply(request),
    );
    const { view, history } = await runSession(`${marker} build it`, server);
    expect(view.session.state).toBe('FAILED');

    const errors = errorsOf(history);
    expect(errors.length).toBeGreaterThan(0);
    expect(errors[0]).toMatchObject({ role: 'planner', code: 'LLM_OUTPUT_INVALID' });
    expect(errors[0]?.message).toContain('PlanBreakdown');
    expect(errors[0]?.message).toContain('tasks.0.acceptance');
    // Two queue attempts (cluster config), each a first try and one repair.
    expect(requestsWith(server, marker, 'PlanBreakdown')).toHaveLength(4);
    // Every reply was billed: the failed calls count their tokens, not as successful calls.
    expect(view.usage.byRole.planner).toMatchObject({
      inputTokens: 4 * FAKE_USAGE.input,
      outputTokens: 4 * FAKE_USAGE.output,
      calls: 0,
    });
    expect(view.usage.failedCalls).toBe(2);
  });

  it('a reply cut off at the output limit fails the job at once, its tokens counted', async () => {
    const marker = '[cut-off]';
    const server = servers.openai;
    behaviours.set(marker, (request) =>
      request.schemaName === 'PlanBreakdown'
        ? { truncated: '{"tasks": [{"id": "t1", "ti' }
        : happyReply(request),
    );
    const { view, history } = await runSession(`${marker} build it`, server);
    expect(view.session.state).toBe('FAILED');
    const errors = errorsOf(history);
    expect(errors[0]).toMatchObject({ role: 'planner', code: 'LLM_CALL_FAILED' });
    expect(errors[0]?.message).toContain('cut off at the output token limit');
    expect(errors[0]?.message).toContain('Raise llm.planner.maxOutputTokens');
    // Not retried by the queue (the cluster gives jobs two attempts): the same limit cuts it again.
    expect(requestsWith(server, marker, 'PlanBreakdown')).toHaveLength(1);
    expect(view.usage.byRole.planner).toMatchObject({
      inputTokens: FAKE_USAGE.input,
      outputTokens: FAKE_USAGE.output,
      calls: 0,
    });
  });
});

describe('what a judge model is asked for and must answer', () => {
  const judgementsOf = (history: HistoryEntry[], subject: 'plan' | 'task') =>
    history.flatMap((e) =>
      e.type === 'judgement' && e.subject === subject
        ? [e.judgement as Record<string, unknown>]
        : [],
    );

  it('a plan judgement without a score gets a repair turn, not "score unavailable"', async () => {
    const marker = '[no-score]';
    const server = servers.openai;
    behaviours.set(marker, (request) =>
      request.schemaName === 'QualityJudgement' && !request.followUp
        ? { json: { isAcceptable: true, issues: [], suggestions: [] } }
        : happyReply(request),
    );
    const { view, history } = await runSession(`${marker} build it`, server);
    expect(view.session.state).toBe('COMPLETED');
    const judgeRequests = requestsWith(server, marker, 'QualityJudgement');
    expect(judgeRequests).toHaveLength(2);
    expect(judgeRequests[1]?.messages.at(-1)?.content).toContain('score');
    expect(judgementsOf(history, 'plan')).toEqual([expect.objectContaining({ score: 90 })]);
  });

  it("is shown only what it answers, and orq's own fields it sends are dropped", async () => {
    const marker = '[invented-samples]';
    const server = servers.anthropic;
    behaviours.set(marker, (request) =>
      request.schemaName === 'QualityJudgement'
        ? { json: { ...goodJudgement, samples: [12, 55, 98], spread: 86 } }
        : happyReply(request),
    );
    const { view, history } = await runSession(`${marker} build it`, server);
    expect(view.session.state).toBe('COMPLETED');
    const [request] = requestsWith(server, marker, 'QualityJudgement');
    const { schema } = (
      request?.body.output_config as { format: { schema: Record<string, unknown> } }
    ).format;
    expect(Object.keys(schema.properties as object).sort()).toEqual([
      'isAcceptable',
      'issues',
      'score',
      'suggestions',
    ]);
    expect(schema.required).toEqual(expect.arrayContaining(['score', 'isAcceptable']));
    const [judgement] = judgementsOf(history, 'plan');
    expect(judgement).toMatchObject({ score: 90 });
    expect(judgement).not.toHaveProperty('samples');
    expect(judgement).not.toHaveProperty('spread');
  });

  it('a failed task verdict that names no next step gets a repair turn instead of blocking', async () => {
    const marker = '[no-flags]';
    const server = servers.anthropic;
    behaviours.set(marker, (request) => {
      const [, id, execution] = taskOf(request) ?? [];
      if (request.schemaName !== 'TaskJudgement' || id !== 't1' || execution !== '1') {
        return happyReply(request);
      }
      return request.followUp
        ? {
            json: {
              success: false,
              shouldContinue: true,
              shouldReplan: false,
              reason: 'add the unique index on email',
            },
          }
        : { json: { success: false, reason: 'the unique index on email is missing' } };
    });
    const { view, history } = await runSession(`${marker} build it`, server);
    expect(view.session.state).toBe('COMPLETED');
    const repair = requestsWith(server, marker, 'TaskJudgement').find((r) => r.followUp);
    expect(repair?.messages.at(-1)?.content).toContain('shouldContinue');
    expect(executionsOf(history, 't1')).toHaveLength(2);
    expect(judgementsOf(history, 'task')).toContainEqual(
      expect.objectContaining({ success: false, shouldContinue: true }),
    );
  });

  it('with judging.checkAlreadySatisfied, asks before each task runs and skips the one met already', async () => {
    const marker = '[check-before-run]';
    const server = servers.anthropic;
    const notRunYet = (request: FakeLlmRequest) =>
      /\(id `([^`]+)`\), not run yet/.exec(request.text)?.[1];
    behaviours.set(marker, (request) => {
      const id = request.schemaName === 'TaskJudgement' ? notRunYet(request) : undefined;
      if (id === undefined) return happyReply(request);
      const met = id === 't1';
      return {
        json: {
          success: met,
          shouldContinue: false,
          shouldReplan: false,
          alreadySatisfied: met,
          reason: met ? 'the users table exists already' : 'nothing of it exists yet',
        },
      };
    });
    const { view, history } = await runSession(
      `${marker} build it`,
      server,
      {},
      {
        judging: { checkAlreadySatisfied: true },
      },
    );
    expect(view.session.state).toBe('COMPLETED');
    expect(view.tasks.find((t) => t.id === 't1')?.state).toBe('SKIPPED');
    expect(view.tasks.filter((t) => t.id !== 't1').every((t) => t.state === 'DONE')).toBe(true);
    const checks = requestsWith(server, marker, 'TaskJudgement').filter((r) => notRunYet(r));
    expect(new Set(checks.map(notRunYet))).toEqual(new Set(view.tasks.map((t) => t.id)));
    expect(checks[0]?.text).toContain('is about to run for the first time');
    expect(executionsOf(history, 't1')).toHaveLength(0);
  });

  it('refuses alreadySatisfied without success with a repair turn; with success the task is SKIPPED', async () => {
    const marker = '[already-satisfied]';
    const server = servers.openai;
    behaviours.set(marker, (request) => {
      const [, id] = taskOf(request) ?? [];
      if (request.schemaName !== 'TaskJudgement' || id !== 't1') return happyReply(request);
      return request.followUp
        ? {
            json: {
              success: true,
              shouldContinue: false,
              shouldReplan: false,
              alreadySatisfied: true,
              reason: 'the index existed before',
            },
          }
        : {
            json: {
              success: false,
              shouldContinue: false,
              shouldReplan: false,
              alreadySatisfied: true,
              reason: 'nothing to do',
            },
          };
    });
    const { view, history } = await runSession(`${marker} build it`, server);
    expect(view.session.state).toBe('COMPLETED');
    const repair = requestsWith(server, marker, 'TaskJudgement').find((r) => r.followUp);
    expect(repair?.messages.at(-1)?.content).toContain('alreadySatisfied');
    expect(view.tasks.find((t) => t.id === 't1')?.state).toBe('SKIPPED');
    expect(judgementsOf(history, 'task')).toContainEqual(
      expect.objectContaining({ success: true, alreadySatisfied: true }),
    );
  });
});

describe('a server that ignores the requested reply format', () => {
  /** A model that answers in its own shape unless it is shown the schema. */
  const ignoresFormat = (request: FakeLlmRequest): FakeReply =>
    request.schemaInText
      ? happyReply(request)
      : { text: JSON.stringify({ answer: 'here is my answer' }) };

  it.each(['openai', 'anthropic'] as const)(
    '%s: the repair turn shows the schema, and the role then asks in prompt mode',
    async (p) => {
      const marker = `[ignores-format ${p}]`;
      const server = servers[p];
      behaviours.set(marker, ignoresFormat);
      // A model name of its own: the fall-back holds for every session of the same config.
      const { view, history } = await runSession(`${marker} build it`, server, {
        judge: { model: 'ignores-format' },
        worker: { model: 'ignores-format' },
      });
      expect(view.session.state).toBe('COMPLETED');
      // The history says why the worker's prompts changed: its first execution's log.
      expect(executionsOf(history, 't1')[0]?.result.log).toContain(
        'llm.worker.structuredOutput "prompt"',
      );

      const judge = requestsWith(server, marker).filter((r) =>
        ['QualityJudgement', 'TaskJudgement'].includes(r.schemaName),
      );
      // The first call asked natively and got the model's own shape; its repair showed the schema.
      expect(judge[0]).toMatchObject({ formatRequested: true, schemaInText: false });
      expect(judge[1]).toMatchObject({ followUp: true, schemaInText: true });
      // Every later judge call is in prompt mode: the schema in the prompt, no format asked.
      const later = judge.slice(2);
      expect(later.length).toBeGreaterThanOrEqual(2);
      for (const request of later) {
        expect(request).toMatchObject({ formatRequested: false, followUp: false });
        expect(request.system).toMatch(/"properties":\s*\{/);
      }
      // The same for the worker: one repair, then prompt mode.
      const worker = requestsWith(server, marker, 'TaskOutput');
      expect(worker.map((r) => [r.formatRequested, r.followUp])).toEqual([
        [true, false],
        [true, true],
        ...worker.slice(2).map(() => [false, false]),
      ]);
    },
  );
});

describe('record and replay', () => {
  it('replays a recorded session without the server, to the same result', async () => {
    const path = mkdtempSync(join(tmpdir(), 'orq-recording-'));
    tempDirs.push(path);
    const recorder = await startFakeLlmServer('openai', happyReply);
    const instruction = '[replan] record this session';
    const recorded = await runSession(instruction, recorder, { record: { mode: 'record', path } });
    expect(recorded.view.session.state).toBe('COMPLETED');
    const calls = recorder.requests.length;
    await recorder.close();
    expect(readdirSync(path).filter((f) => f.endsWith('.json'))).toHaveLength(calls);

    // The server is gone: every answer now comes from the recording.
    const replayed = await runSession(instruction, recorder, { record: { mode: 'replay', path } });
    expect(replayed.view.session.state).toBe('COMPLETED');
    const summary = (tasks: Task[]) =>
      tasks.map((t) => [t.id, t.state, t.title, t.result?.output, t.result?.tokenUsage]);
    expect(summary(replayed.view.tasks)).toEqual(summary(recorded.view.tasks));
    // Independent tasks finish in any order: compare the decisions, not their interleaving.
    const decisions = (history: HistoryEntry[]) =>
      history.flatMap((e) => (e.type === 'decision' ? [`${e.taskId} ${e.decision}`] : [])).sort();
    expect(decisions(replayed.history)).toEqual(decisions(recorded.history));
    expect(recorder.requests).toHaveLength(calls);

    // A request that was never recorded fails clearly.
    const other = await runSession('[replan] another instruction', recorder, {
      record: { mode: 'replay', path },
    });
    expect(other.view.session.state).toBe('FAILED');
    expect(errorsOf(other.history)[0]?.message).toMatch(
      /No recorded reply for the planner request [0-9a-f]{64}/,
    );
  });
});

describe('keys, timeouts and cancellation', () => {
  it('a missing API key fails the session with an error naming the variable', async () => {
    delete process.env.ORQ_TEST_UNSET_KEY;
    const { view, history } = await runSession('[no-key] build it', servers.openai, {
      planner: { apiKeyEnv: 'ORQ_TEST_UNSET_KEY' },
    });
    expect(view.session.state).toBe('FAILED');
    expect(errorsOf(history)[0]?.message).toContain('ORQ_TEST_UNSET_KEY');
    expect(requestsWith(servers.openai, '[no-key]')).toEqual([]);
  });

  /** Submits a session whose worker call hangs, cancels it once the call is made, waits for the abort. */
  async function cancelHangingCall(on: TestCluster, marker: string): Promise<void> {
    const server = servers.openai;
    behaviours.set(marker, (request) =>
      request.schemaName === 'TaskOutput' ? { hang: true } : happyReply(request),
    );
    const abortedBefore = server.aborted;
    const session = await on.client.submit({
      instruction: `${marker} build it`,
      config: llmConfig(server),
    });
    await eventually(
      () => (requestsWith(server, marker, 'TaskOutput').length > 0 ? true : undefined),
      'a worker call to hang',
      15_000,
    );
    await on.client.cancel(session.id, 'test cancels');
    await eventually(
      () => (server.aborted > abortedBefore ? true : undefined),
      'the hanging call to be aborted',
      15_000,
    );
    expect((await on.client.get(session.id)).session.state).toBe('CANCELLED');
  }

  it('cancelling a session aborts its model call in flight', async () => {
    await cancelHangingCall(cluster, '[hang]');
  });

  it('the cancel reaches the call through its announcement, not the pods polling the state', async () => {
    // Pods that would read the session's state once an hour: only the announcement can stop it.
    const slowPolling = await startCluster({ cancelPollMs: 3_600_000 });
    try {
      await cancelHangingCall(slowPolling, '[hang announced]');
    } finally {
      await slowPolling.close();
    }
  });

  describe.each(['openai', 'anthropic'] as const)('the %s provider alone', (p) => {
    const roleConfig = (server: FakeLlmServer) =>
      parseConfig({
        llm: {
          default: { provider: p, model: 'test', baseUrl: server.baseUrl, apiKeyEnv: 'TEST_KEY' },
        },
      }).llm.default;
    const request = (marker: string, timeoutMs = 10_000): ChatRequest => ({
      role: 'judge',
      system: 'judge',
      user: `${marker} the plan`,
      schema: QualityJudgementAnswer,
      schemaName: 'QualityJudgement',
      temperature: 0,
      timeoutMs,
    });
    const provider = (server: FakeLlmServer): ChatProvider =>
      p === 'openai'
        ? createOpenAiProvider('judge', roleConfig(server))
        : createAnthropicProvider('judge', roleConfig(server));

    it('answers a baseUrl with /v1 where the SDK adds none, or without where it adds one, with a hint saying so', async () => {
      const server = servers[p];
      const wrong =
        p === 'anthropic' ? `${server.baseUrl}/v1` : server.baseUrl.replace(/\/v1$/, '');
      const error = await provider({ ...server, baseUrl: wrong })
        .complete(request(`[wrong base ${p}]`))
        .then(
          () => undefined,
          (e: unknown) => e as OrqError,
        );
      expect(error?.details.status).toBe(404);
      expect(error?.hint).toContain(
        p === 'anthropic' ? 'leave /v1 out' : `serve their API under /v1 (${server.baseUrl})`,
      );
    });

    it('names what the server said of a refused request, not its raw JSON body, and the status once', async () => {
      const marker = `[422 ${p}]`;
      behaviours.set(marker, () => ({ status: 422 }));
      const error = await provider(servers[p])
        .complete(request(marker))
        .then(
          () => undefined,
          (e: unknown) => e as OrqError,
        );
      expect(error?.summary).toBe(
        `The judge call to ${p}:test failed with HTTP 422: scripted: scripted 422`,
      );
    });

    it('turns a 400 into the setting to change, from what the server said it refused', async () => {
      const cases: [said: string, hint: RegExp][] = [
        // Ollama, for a model without function calling.
        ['registry.ollama.ai/library/gemma:2b does not support tools', /toolCalling "structured"/],
        // OpenAI's reasoning models.
        [
          "Unsupported value: 'temperature' does not support 0 with this model. Only the default (1) value is supported.",
          /remove llm\.judge\.temperature/,
        ],
        ['max_tokens: 200000 > 128000, which is the maximum allowed', /maxOutputTokens within/],
        // vLLM, for a prompt longer than --max-model-len.
        [
          "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens.",
          /context length \(vLLM --max-model-len/,
        ],
        [
          "Invalid parameter: 'response_format' of type 'json_schema' is not supported with this model.",
          /structuredOutput "json" or "prompt"/,
        ],
      ];
      for (const [said, hint] of cases) {
        const marker = `[400 ${p} ${said.slice(0, 20)}]`;
        behaviours.set(marker, () => ({
          status: 400,
          type: 'invalid_request_error',
          message: said,
        }));
        const error = await provider(servers[p])
          .complete(request(marker))
          .then(
            () => undefined,
            (e: unknown) => e as OrqError,
          );
        expect(error?.summary, said).toContain(said);
        expect(error?.hint, said).toMatch(hint);
      }
    });

    it('says, when it times out while retrying, what the server had answered until then', async () => {
      const marker = `[always 503 ${p}]`;
      behaviours.set(marker, () => ({ status: 503, retryAfterMs: 500 }));
      const error = await provider(servers[p])
        .complete(request(marker, 700))
        .then(
          () => undefined,
          (e: unknown) => e as OrqError,
        );
      expect(error?.details.kind).toBe('timeout');
      expect(error?.summary).toMatch(
        new RegExp(
          `^The judge call to ${p}:test timed out after 0.7s \\(the server had answered 503( ×\\d)?\\)$`,
        ),
      );
    });

    it('retries a 503 and returns the reply with the usage the server reported', async () => {
      const marker = `[503 ${p}]`;
      let failed = false;
      behaviours.set(marker, (r) => {
        if (failed) return happyReply(r);
        failed = true;
        return { status: 503, retryAfterMs: 10 };
      });
      const reply = await provider(servers[p]).complete(request(marker));
      expect(JSON.parse(reply.raw)).toEqual(goodJudgement);
      expect(reply.usage).toEqual({
        inputTokens: FAKE_USAGE.input,
        outputTokens: FAKE_USAGE.output,
      });
      expect(requestsWith(servers[p], marker)).toHaveLength(2);
    });

    it("a caller's own deadline (the replanner's seed 001 limit) counts as a timeout, an abort as a cancellation", async () => {
      const marker = `[deadline ${p}]`;
      behaviours.set(marker, () => ({ hang: true }));
      const withDeadline = { ...request(marker), signal: AbortSignal.timeout(200) };
      await expect(provider(servers[p]).complete(withDeadline)).rejects.toThrow(/timed out/);
      const controller = new AbortController();
      const cancelled = provider(servers[p]).complete({
        ...request(marker),
        signal: controller.signal,
      });
      setTimeout(() => controller.abort(), 100);
      await expect(cancelled).rejects.toMatchObject({
        name: 'AbortError',
        message: expect.stringContaining('was cancelled') as unknown,
      });
    });

    it("a Retry-After longer than the call's time ends it at its deadline, or at a cancel", async () => {
      const marker = `[retry-after ${p}]`;
      // An hour's wait, as gateways send for an exhausted quota.
      behaviours.set(marker, () => ({ status: 429, retryAfterMs: 3_600_000 }));
      await expect(provider(servers[p]).complete(request(marker, 500))).rejects.toThrow(
        /judge call to .*timed out after 0.5s/,
      );
      const controller = new AbortController();
      const cancelled = provider(servers[p]).complete({
        ...request(marker),
        signal: controller.signal,
      });
      setTimeout(() => controller.abort(), 200);
      await expect(cancelled).rejects.toMatchObject({ name: 'AbortError' });
      // One request each: the SDK's wait was cut short, not followed by a retry.
      expect(requestsWith(servers[p], marker)).toHaveLength(2);
    });

    it('a reply cut off at the output limit is a permanent failure carrying the billed usage', async () => {
      const marker = `[truncated ${p}]`;
      behaviours.set(marker, () => ({ truncated: '{"score": 9' }));
      const error = await provider(servers[p])
        .complete(request(marker))
        .then(
          () => undefined,
          (e: unknown) => e,
        );
      expect(error).toBeInstanceOf(OrqError);
      expect((error as OrqError).message).toMatch(/cut off .*Raise llm.judge.maxOutputTokens/);
      expect(isPermanentCallFailure(error)).toBe(true);
      expect(usageOfFailure(error)).toEqual({
        inputTokens: FAKE_USAGE.input,
        outputTokens: FAKE_USAGE.output,
      });
    });

    it('names what went wrong when the server cannot be reached, not "fetch failed"', async () => {
      const probe = createServer();
      await new Promise<void>((r) => probe.listen(0, '127.0.0.1', r));
      const { port } = probe.address() as AddressInfo;
      await new Promise((r) => probe.close(r));
      const closed = { ...servers[p], baseUrl: servers[p].baseUrl.replace(/:\d+/, `:${port}`) };
      await expect(
        provider(closed).complete({ ...request('[closed]'), timeoutMs: 5_000 }),
      ).rejects.toThrow(/unreachable at http:\/\/127\.0\.0\.1:\d+.*ECONNREFUSED/);
    });

    it('counts a reply whose server reports no usage by estimate of all it sent, not as free', async () => {
      const marker = `[no-usage ${p}]`;
      behaviours.set(marker, () => ({ json: goodJudgement, noUsage: true }));
      // Japanese: about a token a character, where characters ÷ 4 counts a quarter of it.
      const sent = {
        ...request(marker),
        user: `${marker} ${'認証スキーマとログインAPIの計画を審査してください。'.repeat(8)}`,
      };
      const reply = await provider(servers[p]).complete(sent);
      const [got] = requestsWith(servers[p], marker);
      if (!got) throw new Error('the request did not arrive');
      // What the server got, counted: the prompts and the reply's JSON Schema sent with them.
      const body = got.body as {
        response_format?: { json_schema: { schema: unknown } };
        output_config?: { format: { schema: unknown } };
      };
      const schema = body.response_format?.json_schema.schema ?? body.output_config?.format.schema;
      expect(schema).toBeDefined();
      let arrived = await countTokens(JSON.stringify(schema));
      for (const text of [got.system, ...got.messages.map((m) => m.content)]) {
        arrived += await countTokens(text);
      }
      expect(reply.usage.inputTokens).toBeGreaterThanOrEqual(Math.floor(arrived * 0.9));
      expect(reply.usage.inputTokens).toBeLessThanOrEqual(Math.ceil(arrived * 1.2));
      expect(reply.usage.outputTokens).toBe(await countTokens(reply.raw));
    });

    it('a 200 that is not a reply says what came back instead', async () => {
      const cases: [string, RegExp, string?][] = [
        ['{"choices": [', /response body is not JSON/],
        [
          '<html><body>502 Bad Gateway</body></html>',
          /not JSON: <html><body>502 Bad Gateway/,
          'text/html',
        ],
        [
          '{"error": {"message": "quota exceeded for this key"}}',
          p === 'openai' ? /answered with an error: quota exceeded for this key/ : /has no content/,
        ],
      ];
      for (const [body, expected, contentType] of cases) {
        const marker = `[raw ${p} ${body.length}]`;
        behaviours.set(marker, () => ({ rawBody: body, ...(contentType ? { contentType } : {}) }));
        const error = await provider(servers[p])
          .complete(request(marker))
          .then(
            () => undefined,
            (e: unknown) => e,
          );
        expect(error, body).toBeInstanceOf(OrqError);
        expect((error as OrqError).message, body).toMatch(expected);
        // Not the hint for a reply cut off: nothing was.
        expect((error as OrqError).message, body).not.toContain('maxOutputTokens');
        expect(isPermanentCallFailure(error), body).toBe(false);
      }
    });

    it('a server that never follows the format: the repair shows the schema, the failure names prompt mode', async () => {
      const marker = `[never-format ${p}]`;
      behaviours.set(marker, () => ({ text: 'The plan looks fine to me.' }));
      const error = await callStructured(provider(servers[p]), request(marker), {
        maxRepairAttempts: 1,
        structuredOutput: 'native',
      }).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(OrqError);
      expect((error as OrqError).code).toBe('LLM_OUTPUT_INVALID');
      expect((error as OrqError).hint).toContain('llm.judge.structuredOutput "prompt"');
      const sent = requestsWith(servers[p], marker);
      expect(sent.map((r) => [r.followUp, r.schemaInText])).toEqual([
        [false, false],
        [true, true],
      ]);
    });

    it('gives up at the call timeout and says so', async () => {
      const marker = `[slow ${p}]`;
      behaviours.set(marker, () => ({ hang: true }));
      await expect(provider(servers[p]).complete(request(marker, 300))).rejects.toThrow(
        /judge call to .*timed out after 0.3s/,
      );
    });
  });
});

describe('what each protocol needs (issue 34)', () => {
  const request = (marker: string): ChatRequest => ({
    role: 'judge',
    system: 'judge',
    user: `${marker} the plan`,
    schema: QualityJudgementAnswer,
    schemaName: 'QualityJudgement',
    timeoutMs: 10_000,
  });

  it("a role that switches provider uses that provider's own base URL and key, not the default's", async () => {
    // An Ollama default; the planner on Anthropic, whose SDK takes its server from
    // ANTHROPIC_BASE_URL when no baseUrl is set, as a gateway user would.
    const config = parseConfig({
      llm: {
        default: { provider: 'openai', baseUrl: servers.openai.baseUrl, model: 'qwen2.5:14b' },
        planner: { provider: 'anthropic', model: 'claude-test' },
      },
    });
    const models = createLlmModels(sessionRoleConfigs(config), {
      maxRepairAttempts: 0,
      env: { ANTHROPIC_API_KEY: 'sk-ant-planner' },
    });
    const marker = '[planner on anthropic]';
    const previous = process.env.ANTHROPIC_BASE_URL;
    process.env.ANTHROPIC_BASE_URL = servers.anthropic.baseUrl;
    try {
      const reply = await models.plan({
        sessionId: 'switch',
        instruction: marker,
        attempt: 0,
        requiredTerms: [],
        config,
      });
      expect(reply.value.tasks).toHaveLength(2);
    } finally {
      if (previous === undefined) delete process.env.ANTHROPIC_BASE_URL;
      else process.env.ANTHROPIC_BASE_URL = previous;
    }
    const [sent] = requestsWith(servers.anthropic, marker);
    expect(sent?.headers['x-api-key']).toBe('sk-ant-planner');
    expect(requestsWith(servers.openai, marker)).toEqual([]);
  });

  it('sends the Anthropic key in x-api-key, not as a bearer token', async () => {
    const marker = '[x-api-key]';
    const config = parseConfig({
      llm: {
        default: {
          provider: 'anthropic',
          model: 'test',
          baseUrl: servers.anthropic.baseUrl,
          apiKeyEnv: 'TEST_KEY',
        },
      },
    }).llm.default;
    await createAnthropicProvider('judge', config).complete(request(marker));
    const [sent] = requestsWith(servers.anthropic, marker);
    expect(sent?.headers['x-api-key']).toBe(KEY);
    expect(sent?.headers.authorization).toBeUndefined();
  });

  it('sends a temperature only to the roles that set one', async () => {
    const marker = '[temperature unset]';
    const { view } = await runSession(`${marker} login`, servers.openai, {
      judge: { temperature: 0.2 },
    });
    expect(view.session.state).toBe('COMPLETED');
    const sent = requestsWith(servers.openai, marker);
    const judged = sent.filter((r) => /Judgement$/.test(r.schemaName));
    const others = sent.filter((r) => !/Judgement$/.test(r.schemaName));
    expect(judged.length).toBeGreaterThan(0);
    expect(others.length).toBeGreaterThan(0);
    for (const r of judged) expect(r.body.temperature, r.schemaName).toBe(0.2);
    for (const r of others) expect(r.body, r.schemaName).not.toHaveProperty('temperature');
  });

  it("sends Anthropic the role's maxOutputTokens as max_tokens, and room for long output when unset", async () => {
    const roleConfig = (extra: object) =>
      parseConfig({
        llm: {
          default: {
            provider: 'anthropic',
            model: 'test',
            baseUrl: servers.anthropic.baseUrl,
            apiKeyEnv: 'TEST_KEY',
            ...extra,
          },
        },
      }).llm.default;
    await createAnthropicProvider('worker', roleConfig({})).complete(request('[max unset]'));
    await createAnthropicProvider('worker', roleConfig({ maxOutputTokens: 64_000 })).complete(
      request('[max set]'),
    );
    expect(requestsWith(servers.anthropic, '[max unset]')[0]?.body.max_tokens).toBe(16_384);
    expect(DEFAULT_ANTHROPIC_MAX_TOKENS).toBe(16_384);
    expect(requestsWith(servers.anthropic, '[max set]')[0]?.body.max_tokens).toBe(64_000);
  });

  it("logs the SDK's deprecated-model warning once through pino, not on stderr on every call", async () => {
    const lines: string[] = [];
    routeProviderWarnings(pino({ level: 'info' }, { write: (line: string) => lines.push(line) }));
    const warn = vi.spyOn(console, 'warn');
    try {
      const config = parseConfig({
        llm: {
          default: {
            provider: 'anthropic',
            // In the SDK's list of deprecated models (end of life 2026-11-30).
            model: 'claude-sonnet-4-5',
            baseUrl: servers.anthropic.baseUrl,
            apiKeyEnv: 'TEST_KEY',
          },
        },
      }).llm.default;
      const provider = createAnthropicProvider('judge', config);
      await provider.complete(request('[deprecated 1]'));
      await provider.complete(request('[deprecated 2]'));
      expect(warn).not.toHaveBeenCalled();
    } finally {
      warn.mockRestore();
    }
    const logged = lines.map((line) => JSON.parse(line) as Record<string, unknown>);
    expect(logged).toHaveLength(1);
    expect(logged[0]).toMatchObject({ level: 40, role: 'judge', model: 'claude-sonnet-4-5' });
    expect(logged[0]?.msg).toMatch(/claude-sonnet-4-5' is deprecated/);
  });

  it('warns once, through pino, when the server counted far fewer prompt tokens than it was sent (a prompt cut at its context)', async () => {
    const lines: string[] = [];
    routeProviderWarnings(pino({ level: 'info' }, { write: (line: string) => lines.push(line) }));
    const config = parseConfig({
      llm: { default: { provider: 'openai', model: 'qwen-cut', baseUrl: servers.openai.baseUrl } },
    }).llm.default;
    const provider = createOpenAiProvider('worker', config);
    // About 10,000 tokens sent; Ollama at a 4,096-token context keeps half and says 2,050.
    const long = (marker: string) => ({
      ...request(marker),
      user: `${marker} ${'x'.repeat(40_000)}`,
    });
    behaviours.set('[fits]', () => ({ json: goodJudgement, promptTokens: 9_800 }));
    await provider.complete(long('[fits]'));
    expect(lines).toEqual([]);
    behaviours.set('[cut]', () => ({ json: goodJudgement, promptTokens: 2_050 }));
    await provider.complete(long('[cut]'));
    await provider.complete(long('[cut]'));
    const logged = lines.map((line) => JSON.parse(line) as Record<string, unknown>);
    expect(logged).toHaveLength(1);
    expect(logged[0]).toMatchObject({ level: 40, role: 'worker', promptTokens: 2_050 });
    expect(logged[0]?.msg).toMatch(
      /counted 2050 prompt tokens for a prompt of about 100\d\d.*OLLAMA_CONTEXT_LENGTH/,
    );
  });
});
