import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { createServer, type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/shared/config/load.js';
import type { HistoryEntry } from '../../src/shared/domain/history.js';
import { QualityJudgement } from '../../src/shared/domain/plan.js';
import type { Task } from '../../src/shared/domain/task.js';
import { createAnthropicProvider } from '../../src/shared/llm/anthropic-provider.js';
import {
  estimateUsage,
  isPermanentCallFailure,
  usageOfFailure,
  type ChatProvider,
  type ChatRequest,
} from '../../src/shared/llm/chat.js';
import { OrqError } from '../../src/shared/errors.js';
import { createOpenAiProvider } from '../../src/shared/llm/openai-provider.js';
import { startCluster, type TestCluster } from '../support/cluster.js';
import {
  FAKE_USAGE,
  startFakeLlmServer,
  type FakeLlmRequest,
  type FakeLlmServer,
  type FakeReply,
  type Protocol,
} from '../support/fake-llm-server.js';
import { eventually, executionsOf, historyOf } from '../support/scenarios.js';

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
      return { json: { success: true, reason: 'meets the criteria' } };
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
) {
  const session = await cluster.client.submit({ instruction, config: llmConfig(server, llm) });
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
      expect(first?.body.tool_choice).toMatchObject({ type: 'tool', name: 'PlanBreakdown' });
      const tools = first?.body.tools as { name: string; input_schema: { type: string } }[];
      expect(tools.map((t) => [t.name, t.input_schema.type])).toEqual([
        ['PlanBreakdown', 'object'],
      ]);
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
      schema: QualityJudgement,
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

    it('counts a reply whose server reports no usage by estimate, not as free', async () => {
      const marker = `[no-usage ${p}]`;
      behaviours.set(marker, () => ({ json: goodJudgement, noUsage: true }));
      const sent = request(marker);
      const reply = await provider(servers[p]).complete(sent);
      if (p === 'openai') {
        expect(reply.usage).toEqual(estimateUsage(sent, reply.raw));
        expect(reply.usage.inputTokens).toBeGreaterThan(0);
        expect(reply.usage.outputTokens).toBeGreaterThan(0);
      } else {
        // Anthropic always reports usage: the fake server leaves it in.
        expect(reply.usage).toEqual({
          inputTokens: FAKE_USAGE.input,
          outputTokens: FAKE_USAGE.output,
        });
      }
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

    it('gives up at the call timeout and says so', async () => {
      const marker = `[slow ${p}]`;
      behaviours.set(marker, () => ({ hang: true }));
      await expect(provider(servers[p]).complete(request(marker, 300))).rejects.toThrow(
        /judge call to .*timed out after 0.3s/,
      );
    });
  });
});
