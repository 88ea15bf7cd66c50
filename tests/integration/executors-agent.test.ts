import {
  existsSync,
  mkdtempSync,
  readFileSync,
  realpathSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { formatHistoryEntry } from '../../src/producers/cli/format.js';
import type { HistoryEntry } from '../../src/shared/domain/history.js';
import { OrqError } from '../../src/shared/errors.js';
import { createAgentExecutor } from '../../src/workers/executors/agent/executor.js';
import { planningHistoryFile } from '../../src/workers/executors/step-history.js';
import { connectMcpServers } from '../../src/workers/executors/agent/tools/mcp.js';
import { silentLogger } from '../../src/shared/logger.js';
import {
  createScriptedAgentModel,
  type AgentScript,
} from '../../src/workers/executors/agent/scripted-model.js';
import type { AgentPlan } from '../../src/workers/executors/agent/types.js';
import { jobIds } from '../../src/shared/queues.js';
import { ProviderQuotas, QuotaWaitError } from '../../src/workers/llm/quota.js';
import type { ChatProvider } from '../../src/workers/llm/chat.js';
import type { LlmRoleConfig } from '../../src/shared/config/schema.js';
import { QuotaStore } from '../../src/shared/store/quota-store.js';
import { clusterPerTest, type TestCluster } from '../support/cluster.js';
import { bullQueue } from '../support/pods.js';
import { taskWorkspacePath } from '../../src/workers/executors/workspace-dir.js';
import { FAKE_USAGE, startFakeLlmServer, type FakeReply } from '../support/fake-llm-server.js';
import {
  executorContext,
  historyOf,
  makeSession,
  openStore,
  recordSession,
} from '../support/executors.js';

const MCP_SERVER = fileURLToPath(new URL('../fixtures/mcp-calc-server.mjs', import.meta.url));

let tmp: string;
let db: ReturnType<typeof openStore>;
beforeAll(() => {
  tmp = realpathSync(mkdtempSync(join(tmpdir(), 'orq-agent-')));
  db = openStore();
});
afterAll(() => {
  db.close();
  rmSync(tmp, { recursive: true, force: true });
});

const plan = (objective: string): AgentPlan => ({
  goal_understanding: {
    main_objective: objective,
    success_criteria: ['notes exist'],
    constraints: [],
  },
  task_decomposition: {
    reasoning: 'read, then write',
    subtasks: [{ id: 's1', description: objective, dependencies: [], complexity: 'low' }],
  },
  action_plan: { execution_order: ['s1'], actions: [] },
  comment: 'Plan complete',
});

const task = { id: 't1', title: 'Write the notes', acceptance: 'notes.txt holds the notes' };

function run(script: AgentScript, config: Parameters<typeof makeSession>[0] = {}) {
  const session = makeSession({
    ...config,
    execution: { workspaceRoot: join(tmp, 'ws'), ...(config.execution ?? {}) },
  });
  const model = createScriptedAgentModel(script);
  const executor = createAgentExecutor({ model: () => model });
  return { session, model, executor, ctx: executorContext(db.store, session, task) };
}

const ofTask = (entries: HistoryEntry[]) => entries.filter((e) => e.taskId === 't1');
const types = (entries: HistoryEntry[]) => ofTask(entries).map((e) => e.type);

describe('the agent executor (seed 004 inside a task)', () => {
  it('plans, hits a tool error, reflects, revises its plan and finishes', async () => {
    const { session, executor, ctx } = run({
      plan: plan('Read the draft and write the notes'),
      actions: [
        { tool: 'read_file', input: { path: 'draft.txt' } },
        { tool: 'write_file', input: { path: 'notes.txt', content: 'the notes' } },
        { tool: 'read_file', input: { path: 'notes.txt' } },
        { done: true, summary: 'notes.txt written' },
      ],
      reflections: [
        {
          status: 'failure',
          evaluation: 'draft.txt does not exist; write the notes from the task instead',
          plan_revision_needed: true,
          plan_revision: {
            reason: 'No draft to read',
            changes: ['drop the read step'],
            plan: plan('Write the notes from the task'),
          },
        },
      ],
    });
    const result = await executor.execute(ctx);

    expect(result.error).toBeUndefined();
    expect(result.output).toBe('notes.txt written');
    const history = await historyOf(db.store, session.id);
    expect(types(history)).toEqual([
      'plan',
      'action',
      'reflection',
      'revision',
      'action',
      'action',
    ]);
    const [first, failed, reflection, revision] = ofTask(history);
    expect(first).toMatchObject({ type: 'plan', source: 'agent', attempt: 1 });
    expect(failed).toMatchObject({
      type: 'action',
      tool: 'read_file',
      error: expect.stringContaining('ENOENT'),
    });
    expect(reflection).toMatchObject({
      type: 'reflection',
      evaluation: {
        status: 'failure',
        plan_revision_needed: true,
        trigger: 'error',
        revision_applied: true,
      },
    });
    expect(revision).toMatchObject({
      type: 'revision',
      reason: 'No draft to read',
      changes: ['drop the read step'],
    });
    const workspace = result.artifacts.find((a) => a.kind === 'workspace')?.path ?? '';
    expect(readFileSync(join(workspace, 'notes.txt'), 'utf8')).toBe('the notes');
    expect(result.artifacts).toContainEqual({ kind: 'file', path: 'notes.txt' });
    expect(result.log).toContain('revision: No draft to read');
  });

  it('revises at most planning.revision.max_revisions times', async () => {
    const wantsRevision = {
      status: 'failure' as const,
      evaluation: 'still failing',
      plan_revision_needed: true,
      plan_revision: { reason: 'try again', changes: [] },
    };
    const { session, executor, ctx } = run(
      {
        actions: [
          { tool: 'read_file', input: { path: 'a' } },
          { tool: 'read_file', input: { path: 'b' } },
          { tool: 'read_file', input: { path: 'c' } },
        ],
        reflections: [wantsRevision, wantsRevision, wantsRevision],
      },
      { planning: { revision: { max_revisions: 1 } } },
    );
    await executor.execute(ctx);
    const history = ofTask(await historyOf(db.store, session.id));
    expect(history.filter((e) => e.type === 'reflection')).toHaveLength(3);
    expect(history.filter((e) => e.type === 'revision')).toHaveLength(1);
    expect(
      history
        .filter((e) => e.type === 'reflection')
        .map((e) => e.type === 'reflection' && e.evaluation.revision_applied),
    ).toEqual([true, false, false]);
  });

  it('reflects every trigger_interval actions when nothing fails', async () => {
    const { session, executor, ctx } = run(
      { actions: Array.from({ length: 4 }, () => ({ tool: 'list_files', input: {} })) },
      { planning: { reflection: { trigger_interval: 2 } } },
    );
    await executor.execute(ctx);
    expect(types(await historyOf(db.store, session.id))).toEqual([
      'plan',
      'action',
      'action',
      'reflection',
      'action',
      'action',
      'reflection',
    ]);
  });

  it('stops with an error when the action budget is spent before it says done', async () => {
    const { session, executor, ctx } = run(
      { actions: Array.from({ length: 5 }, () => ({ tool: 'list_files', input: {} })) },
      { execution: { maxAgentActions: 2 } },
    );
    const result = await executor.execute(ctx);
    expect(result.error).toMatch(/action budget of 2 was spent/);
    expect(
      ofTask(await historyOf(db.store, session.id)).filter((e) => e.type === 'action'),
    ).toHaveLength(2);
  });

  it('refuses a path escape with an observation and goes on', async () => {
    writeFileSync(join(tmp, 'outside-secret.txt'), 'top secret');
    const { session, executor, ctx } = run({
      actions: [
        { tool: 'read_file', input: { path: '../../../outside-secret.txt' } },
        { tool: 'write_file', input: { path: join(tmp, 'planted.txt'), content: 'x' } },
        { done: true, summary: 'gave up on the outside files' },
      ],
    });
    const result = await executor.execute(ctx);
    expect(result.output).toBe('gave up on the outside files');
    const actions = ofTask(await historyOf(db.store, session.id)).filter(
      (e) => e.type === 'action',
    );
    expect(actions).toHaveLength(2);
    for (const action of actions) {
      expect(action).toMatchObject({ error: expect.stringContaining('outside the workspace') });
    }
    expect(JSON.stringify(actions)).not.toContain('top secret');
  });

  it('runs no tool once its delivery lost its job', async () => {
    const { session, executor, ctx } = run({
      actions: [
        { tool: 'write_file', input: { path: 'a.txt', content: 'A' } },
        { tool: 'write_file', input: { path: 'b.txt', content: 'B' } },
        { done: true, summary: 'a and b written' },
      ],
    });
    let confirmations = 0;
    const lost = new OrqError('DELIVERY_LOST', 'work job lost its lock');
    // Still this delivery's job for the first tool; another pod's by the second.
    const confirmCurrent = () =>
      (confirmations += 1) === 1 ? Promise.resolve() : Promise.reject(lost);
    await expect(executor.execute({ ...ctx, confirmCurrent })).rejects.toBe(lost);
    const workspace = taskWorkspacePath(join(tmp, 'ws'), session.id, task.id);
    expect(readFileSync(join(workspace, 'a.txt'), 'utf8')).toBe('A');
    expect(existsSync(join(workspace, 'b.txt'))).toBe(false);
  });

  it('resumes a crashed run from its last plan instead of planning again', async () => {
    const actions: AgentScript['actions'] = [
      { tool: 'write_file', input: { path: 'a.txt', content: 'A' } },
      { tool: 'write_file', input: { path: 'b.txt', content: 'B' } },
      { tool: 'read_file', input: { path: 'a.txt' } },
      { done: true, summary: 'a and b written' },
    ];
    const session = makeSession({ execution: { workspaceRoot: join(tmp, 'ws') } });
    const crashing = createScriptedAgentModel({
      plan: plan('Write a and b'),
      actions: [actions[0]!, actions[1]!, { error: 'the pod was killed' }],
    });
    const first = createAgentExecutor({ model: () => crashing });
    await expect(first.execute(executorContext(db.store, session, task))).rejects.toThrow(
      /the pod was killed/,
    );
    expect(types(await historyOf(db.store, session.id))).toEqual(['plan', 'action', 'action']);

    // The redelivered job: same task, same attempt, a model that would plan differently.
    const resumed = createScriptedAgentModel({ plan: plan('A DIFFERENT PLAN'), actions });
    const second = createAgentExecutor({ model: () => resumed });
    const result = await second.execute(executorContext(db.store, session, task));

    expect(resumed.calls.plan).toBe(0);
    expect(resumed.calls.nextAction).toBe(2);
    expect(result.output).toBe('a and b written');
    expect(result.log).toContain('resumed after 3 recorded step(s)');
    expect(result.log).toContain('plan: Write a and b');
    const history = ofTask(await historyOf(db.store, session.id));
    // The third action ends trigger_interval (3): a reflection before it says done.
    expect(history.map((e) => e.type)).toEqual([
      'plan',
      'action',
      'action',
      'action',
      'reflection',
    ]);
    expect(history.filter((e) => e.type === 'plan')).toHaveLength(1);

    // A third delivery of a finished attempt adds nothing.
    const again = createAgentExecutor({ model: () => createScriptedAgentModel({ actions }) });
    await again.execute(executorContext(db.store, session, task));
    expect(ofTask(await historyOf(db.store, session.id))).toHaveLength(5);
  });

  it('starts a new execution attempt with a new plan', async () => {
    const session = makeSession({ execution: { workspaceRoot: join(tmp, 'ws') } });
    const script = { plan: plan('Write'), actions: [{ done: true as const, summary: 'ok' }] };
    const executor = createAgentExecutor({ model: () => createScriptedAgentModel(script) });
    await executor.execute(executorContext(db.store, session, task, { attempt: 1 }));
    await executor.execute(executorContext(db.store, session, task, { attempt: 2 }));
    const plans = ofTask(await historyOf(db.store, session.id)).filter((e) => e.type === 'plan');
    expect(plans.map((p) => p.type === 'plan' && p.attempt)).toEqual([1, 2]);
  });
});

describe('planning.history.storage_type: jsonl', () => {
  it("also appends every step to the task's JSONL file, once", async () => {
    const directory = join(tmp, 'planning_history');
    const { session, executor, ctx } = run(
      {
        actions: [
          { tool: 'read_file', input: { path: 'missing.txt' } },
          { done: true, summary: 'done' },
        ],
      },
      { planning: { history: { storage_type: 'jsonl', directory } } },
    );
    await executor.execute(ctx);
    await executor.execute(ctx); // a redelivery: nothing new to record
    const lines = readFileSync(planningHistoryFile(directory, session.id, 't1'), 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { type: string; timestamp: string; taskId: string });
    expect(lines.map((l) => l.type)).toEqual(['plan', 'action', 'reflection']);
    expect(lines.every((l) => l.taskId === 't1' && !Number.isNaN(Date.parse(l.timestamp)))).toBe(
      true,
    );
    expect(types(await historyOf(db.store, session.id))).toEqual(lines.map((l) => l.type));
  });
});

describe('SessionStore.appendTaskStep', () => {
  it('records a step once however often it is appended, and refuses a gap', async () => {
    const session = makeSession();
    const sessionId = session.id;
    const entry = { type: 'action' as const, tool: 'list_files', input: {}, output: '(empty)' };
    // A step of a session without a record (deleted) is dropped.
    expect(await db.store.appendTaskStep(sessionId, 't9', 1, 0, entry)).toBe('GONE');
    await recordSession(db.store, session);
    expect(await db.store.appendTaskStep(sessionId, 't9', 1, 0, entry)).toBe('OK');
    expect(await db.store.appendTaskStep(sessionId, 't9', 1, 0, entry)).toBe('DUPLICATE');
    expect(await db.store.appendTaskStep(sessionId, 't9', 2, 0, entry)).toBe('OK');
    await expect(db.store.appendTaskStep(sessionId, 't9', 1, 5, entry)).rejects.toBeInstanceOf(
      OrqError,
    );
    expect(await historyOf(db.store, sessionId)).toHaveLength(2);
    expect((await db.store.loadTaskSteps(sessionId, 't9', 1)).map((s) => s.step)).toEqual([0]);
  });
});

describe('MCP tools', () => {
  let http: Server;
  let httpUrl: string;
  beforeAll(async () => {
    // A Streamable HTTP MCP server in this process, stateless: one server per request.
    http = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        void (async () => {
          const server = new McpServer({ name: 'web', version: '1.0.0' });
          server.registerTool(
            'shout',
            { description: 'Upper-case a text', inputSchema: { text: z.string() } },
            async ({ text }) => ({ content: [{ type: 'text', text: text.toUpperCase() }] }),
          );
          const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined });
          res.on('close', () => void transport.close());
          await server.connect(transport);
          const body =
            chunks.length > 0
              ? (JSON.parse(Buffer.concat(chunks).toString()) as unknown)
              : undefined;
          await transport.handleRequest(req, res, body);
        })();
      });
    });
    await new Promise<void>((r) => http.listen(0, '127.0.0.1', r));
    httpUrl = `http://127.0.0.1:${(http.address() as AddressInfo).port}/mcp`;
  });
  afterAll(() => new Promise<void>((r) => http.close(() => r())));

  it('calls tools of a stdio server and of an HTTP server, and reflects on a tool error', async () => {
    const { session, executor, ctx } = run(
      {
        actions: [
          { tool: 'calc__add', input: { a: 2, b: 3 } },
          { tool: 'calc__fail', input: {} },
          { tool: 'calc__echo', input: { text: 'hi' } },
          { tool: 'web__shout', input: { text: 'hello' } },
          { done: true, summary: 'used the MCP tools' },
        ],
      },
      {
        execution: {
          mcpServers: [
            { name: 'calc', transport: 'stdio', command: process.execPath, args: [MCP_SERVER] },
            { name: 'web', transport: 'http', url: httpUrl },
          ],
        },
      },
    );
    const result = await executor.execute(ctx);
    expect(result.log).toMatch(
      /tools: read_file, write_file, list_files, search_files, run_command, calc__add, calc__echo, calc__fail, calc__crash, web__shout/,
    );
    const history = ofTask(await historyOf(db.store, session.id));
    const actions = history.filter((e) => e.type === 'action');
    expect(actions[0]).toMatchObject({ tool: 'calc__add', output: '5' });
    expect(actions[1]).toMatchObject({ tool: 'calc__fail', error: 'calc: this tool always fails' });
    const workspace = result.artifacts.find((a) => a.kind === 'workspace')?.path;
    expect(actions[2]).toMatchObject({ tool: 'calc__echo', output: `hi (cwd ${workspace})` });
    expect(actions[3]).toMatchObject({ tool: 'web__shout', output: 'HELLO' });
    expect(history.map((e) => e.type)).toEqual([
      'plan',
      'action',
      'action',
      'reflection',
      'action',
      'action',
    ]);
    expect(result.output).toBe('used the MCP tools');
  });

  it('names the server, and what it said, when it dies during a call, and starts it again for the next call', async () => {
    const mcp = await connectMcpServers(
      [
        {
          name: 'calc',
          transport: 'stdio',
          command: process.execPath,
          args: [MCP_SERVER],
          env: {},
        },
      ],
      { cwd: tmp, timeoutMs: 10_000, maxOutputBytes: 65_536, logger: silentLogger },
    );
    try {
      const tool = (name: string) => mcp.tools.find((t) => t.spec.name === `calc__${name}`)!;
      const signal = new AbortController().signal;
      await expect(tool('crash').call({}, signal)).rejects.toThrow(
        /MCP server "calc": .*stderr: calc: crashing on purpose.*; the server is started again for the next call$/,
      );
      // Not the failed call again (it may have done its work): the next one, on a new server.
      expect(await tool('add').call({ a: 2, b: 3 }, signal)).toEqual({ ok: true, output: '5' });
    } finally {
      await mcp.close();
    }
  });

  it('goes on without a server that cannot start, and says so in the log', async () => {
    const { executor, ctx } = run(
      {
        actions: [
          { tool: 'broken__anything', input: {} },
          { done: true, summary: 'done anyway' },
        ],
      },
      {
        execution: {
          mcpServers: [
            {
              name: 'broken',
              transport: 'stdio',
              command: process.execPath,
              args: ['-e', 'process.exit(1)'],
            },
          ],
        },
      },
    );
    const result = await executor.execute(ctx);
    expect(result.output).toBe('done anyway');
    expect(result.log).toContain('MCP server "broken" is unavailable');
    expect(result.log).toMatch(/broken__anything .* error: unknown tool/);
  });
});

describe('a session whose tasks run through the builtin agent', () => {
  let cluster: TestCluster | undefined;
  const startCluster = clusterPerTest();

  it('completes, with every agent step in the history and the deliverables in the workspaces', async () => {
    const workspaceRoot = join(tmp, 'cluster-ws');
    cluster = await startCluster({
      config: { execution: { defaultExecutor: 'agent', workspaceRoot } },
    });
    const session = await cluster.client.submit({
      instruction: 'Summarise the design and list the risks',
    });
    const view = await cluster.client.wait(session.id, { timeoutMs: 25_000 });
    expect(view.session.state).toBe('COMPLETED');
    const work = bullQueue(cluster.client.store.redis, cluster.prefix, 'work');
    try {
      const history = (await cluster.client.history(session.id)).map((h) => h.entry);
      for (const t of view.tasks) {
        const own = history.filter((e) => e.taskId === t.id);
        expect(own.filter((e) => e.type === 'plan' && e.source === 'agent')).toHaveLength(1);
        expect(
          own.filter((e) => e.type === 'action').map((e) => e.type === 'action' && e.tool),
        ).toEqual(['list_files', 'write_file', 'read_file']);
        expect(readFileSync(join(workspaceRoot, session.id, t.id, `${t.id}.md`), 'utf8')).toContain(
          `# ${t.title}`,
        );
        // The work job's progress (what Bull Board shows) followed the steps to the last one.
        const steps = await cluster.client.store.loadTaskSteps(session.id, t.id, 1);
        const last = steps.at(-1);
        const job = await work.getJob(jobIds.execute(session.id, t.id, 1));
        expect(last).toBeDefined();
        const tool = last?.entry.type === 'action' ? last.entry.tool : undefined;
        expect(job?.progress).toEqual({
          attempt: 1,
          at: expect.any(String),
          activity: `step ${last?.step}: ${last?.entry.type}${tool ? ` ${tool}` : ''}`,
          step: last?.step,
          type: last?.entry.type,
          ...(tool ? { tool } : {}),
        });
      }
    } finally {
      await work.close();
    }
  });
});

/** The structured replies of an agent that writes hello.txt: its plan, ... */
const HELLO_PLAN: FakeReply = {
  json: {
    ...plan('Write hello.txt'),
    action_plan: { execution_order: ['s1'], actions: ['write_file'] },
  },
};

/** ... its first decision, the write, and every later one, done. */
function helloDecision(decision: number): FakeReply {
  return decision === 1
    ? {
        json: {
          kind: 'tool',
          tool: 'write_file',
          arguments: '{"path":"hello.txt","content":"hello"}',
          summary: '',
        },
      }
    : { json: { kind: 'done', tool: '', arguments: '{}', summary: 'hello.txt written' } };
}

describe('the agent executor with a real LLM (OpenAI protocol, local fake server)', () => {
  it('plans, calls a tool from the structured reply and finishes (toolCalling structured)', async () => {
    let decisions = 0;
    const llm = await startFakeLlmServer('openai', (request) => {
      if (request.schemaName === 'AgentPlan') return HELLO_PLAN;
      if (request.schemaName === 'AgentDecision') return helloDecision((decisions += 1));
      return { status: 500 };
    });
    try {
      const session = makeSession({
        execution: { workspaceRoot: join(tmp, 'ws-llm') },
        llm: {
          worker: {
            provider: 'openai',
            model: 'fake-model',
            baseUrl: llm.baseUrl,
            maxRetries: 0,
            toolCalling: 'structured',
          },
        },
      });
      const result = await createAgentExecutor().execute(executorContext(db.store, session, task));

      expect(result.output).toBe('hello.txt written');
      expect(result.error).toBeUndefined();
      const workspace = result.artifacts.find((a) => a.kind === 'workspace')?.path ?? '';
      expect(readFileSync(join(workspace, 'hello.txt'), 'utf8')).toBe('hello');
      expect(result.tokenUsage).toEqual({
        inputTokens: 3 * FAKE_USAGE.input,
        outputTokens: 3 * FAKE_USAGE.output,
      });
      expect(llm.requests.map((r) => r.schemaName)).toEqual([
        'AgentPlan',
        'AgentDecision',
        'AgentDecision',
      ]);
      // The model saw the tools with their schemas, and the result of its first call.
      expect(llm.requests[1]?.text).toMatch(/- write_file: .*\n {2}input schema: \{/);
      expect(llm.requests[2]?.text).toContain('called write_file');
      const history = ofTask(await historyOf(db.store, session.id));
      expect(history.map((e) => e.type)).toEqual(['plan', 'action']);
      // orq status and watch show the agent's plan by its subtasks, not as 0 tasks of a plan.
      expect(formatHistoryEntry(history[0]!)).toMatch(
        /t1 agent planned 1 subtask\(s\) \(execution 1\)$/,
      );
    } finally {
      await llm.close();
    }
  });
});

describe('the agent executor under a provider quota', () => {
  it('gives its job back on a 429 mid-run, and the run resumes from its recorded steps', async () => {
    let decisions = 0;
    const llm = await startFakeLlmServer('openai', (request) => {
      if (request.schemaName === 'AgentPlan') return HELLO_PLAN;
      // The first decision is answered 429; the next two write the file and say done.
      decisions += 1;
      return decisions === 1 ? { status: 429, retryAfterMs: 2_500 } : helloDecision(decisions - 1);
    });
    try {
      process.env.AGENT_QUOTA_KEY = 'sk-agent-quota';
      const session = makeSession({
        execution: { workspaceRoot: join(tmp, 'ws-quota') },
        llm: {
          worker: {
            provider: 'openai',
            model: 'fake-model',
            baseUrl: llm.baseUrl,
            apiKeyEnv: 'AGENT_QUOTA_KEY',
            maxRetries: 2,
            toolCalling: 'structured',
            rateLimit: {},
          },
        },
      });
      const store = new QuotaStore(db.redis, `agentquota${Date.now()}`);
      const withQuotas = (quotas: ProviderQuotas) => ({
        ...executorContext(db.store, session, task),
        limitChat: (provider: ChatProvider, config: LlmRoleConfig) =>
          quotas.gate(provider, 'worker', config, process.env),
      });
      await expect(
        createAgentExecutor().execute(withQuotas(new ProviderQuotas(store))),
      ).rejects.toBeInstanceOf(QuotaWaitError);
      // The SDK did not retry the 429 itself (maxRetries 2).
      expect(llm.statuses.filter((s) => s === 429)).toHaveLength(1);

      // Delivered again, the run waits out the pause and goes on from its recorded plan.
      const patient = new ProviderQuotas(store, { maxInJobWaitMs: 10_000 });
      const result = await createAgentExecutor().execute(withQuotas(patient));
      expect(result.output).toBe('hello.txt written');
      expect(llm.requests.map((r) => r.schemaName)).toEqual([
        'AgentPlan',
        'AgentDecision',
        'AgentDecision',
        'AgentDecision',
      ]);
    } finally {
      await llm.close();
    }
  });
});

describe.each(['openai', 'anthropic'] as const)(
  'the agent executor with native function calling (%s protocol, local fake server)',
  (protocol) => {
    it('offers every tool with its schema, calls one, and finishes with the done tool', async () => {
      let calls = 0;
      const llm = await startFakeLlmServer(protocol, (request) => {
        if (request.schemaName === 'AgentPlan') return { json: plan('Write hello.txt') };
        if (request.tools.length === 0) return { status: 500 };
        calls += 1;
        // The first call's arguments are not what write_file takes: a repair turn says why.
        if (calls === 1) return { toolCall: { name: 'write_file', input: 'hello.txt, hello' } };
        if (calls === 2) {
          return {
            toolCall: { name: 'write_file', input: { path: 'hello.txt', content: 'hello' } },
          };
        }
        return { toolCall: { name: 'orq_task_done', input: { summary: 'hello.txt written' } } };
      });
      try {
        const session = makeSession({
          execution: { workspaceRoot: join(tmp, `ws-native-${protocol}`) },
          llm: {
            worker: {
              provider: protocol,
              model: 'fake-model',
              baseUrl: llm.baseUrl,
              maxRetries: 0,
            },
          },
        });
        const result = await createAgentExecutor().execute(
          executorContext(db.store, session, task),
        );

        expect(result.error).toBeUndefined();
        expect(result.output).toBe('hello.txt written');
        const workspace = result.artifacts.find((a) => a.kind === 'workspace')?.path ?? '';
        expect(readFileSync(join(workspace, 'hello.txt'), 'utf8')).toBe('hello');

        const acting = llm.requests.filter((r) => r.tools.length > 0);
        // The bad call; the repair turn, answered with write_file; the done tool.
        expect(acting).toHaveLength(3);
        expect(acting.map((r) => r.followUp)).toEqual([false, true, false]);
        expect(acting[1]?.text).toContain('Your tool call is not valid: input:');
        expect(acting[0]?.tools).toEqual(expect.arrayContaining(['write_file', 'orq_task_done']));
        expect(acting[0]?.tools.at(-1)).toBe('orq_task_done');
        const body = acting[0]!.body;
        const offered = body.tools as Record<string, unknown>[];
        if (protocol === 'openai') {
          expect(body.tool_choice).toBe('required');
          expect(body).not.toHaveProperty('response_format');
          const write = offered.find(
            (t) => (t.function as { name: string }).name === 'write_file',
          ) as { function: { parameters: { properties: Record<string, unknown> } } };
          expect(Object.keys(write.function.parameters.properties)).toEqual(
            expect.arrayContaining(['path', 'content']),
          );
        } else {
          // auto: current Claude models answer 400 to a forced tool_choice (any or tool).
          expect(body.tool_choice).toMatchObject({ type: 'auto', disable_parallel_tool_use: true });
          const write = offered.find((t) => t.name === 'write_file') as {
            input_schema: { properties: Record<string, unknown> };
          };
          expect(Object.keys(write.input_schema.properties)).toEqual(
            expect.arrayContaining(['path', 'content']),
          );
        }
        // The reply format is the tools' business: the prompt carries no schema for it.
        expect(acting[0]?.text).not.toContain('AgentToolCall');
        const history = ofTask(await historyOf(db.store, session.id));
        expect(history.filter((e) => e.type === 'action')).toHaveLength(1);
      } finally {
        await llm.close();
      }
    });
  },
);
