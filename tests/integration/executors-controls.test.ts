import { execFileSync } from 'node:child_process';
import {
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  realpathSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { HistoryEntry } from '../../src/shared/domain/history.js';
import { countTokens } from '../../src/workers/llm/token-estimate.js';
import { startCluster, type TestCluster } from '../support/cluster.js';
import {
  FAKE_USAGE,
  startFakeLlmServer,
  type FakeLlmRequest,
  type FakeLlmServer,
  type FakeReply,
} from '../support/fake-llm-server.js';
import { eventually, historyOf } from '../support/scenarios.js';

/**
 * What the worker gives every executor besides its models (issue 4): the agent executor's own
 * LLM calls are metered and budgeted like every other call, and cancelling a session stops a
 * running agent loop or coding-agent command instead of letting it run to its limit.
 */

const FAKE_AGENT = fileURLToPath(new URL('../fixtures/fake-coding-agent.mjs', import.meta.url));
const WAIT = { timeoutMs: 25_000 };

let tmp: string;
let cluster: TestCluster;
beforeAll(async () => {
  tmp = realpathSync(mkdtempSync(join(tmpdir(), 'orq-controls-')));
  cluster = await startCluster();
});
afterAll(async () => {
  await cluster?.close();
  rmSync(tmp, { recursive: true, force: true });
});

const agentPlan = {
  goal_understanding: { main_objective: 'write the notes', success_criteria: [], constraints: [] },
  task_decomposition: {
    reasoning: 'one step',
    subtasks: [{ id: 's1', description: 'write', dependencies: [], complexity: 'low' }],
  },
  action_plan: { execution_order: ['s1'], actions: ['write_file'] },
  comment: '',
};
const listFiles = { kind: 'tool', tool: 'list_files', arguments: '{}', summary: '' };

/** Every role through the fake server: one task, accepted; `decide` scripts the agent. */
function script(decide: (n: number) => unknown, delayMs = 0) {
  let decisions = 0;
  return async (request: FakeLlmRequest): Promise<FakeReply> => {
    switch (request.schemaName) {
      case 'PlanBreakdown':
        return {
          json: {
            summary: 'one task',
            tasks: [
              {
                id: 't1',
                title: 'Write the notes',
                acceptance: 'notes.txt exists',
                context: 'a workspace of its own',
                scopePaths: [],
                dependencies: [],
              },
            ],
          },
        };
      case 'QualityJudgement':
        return { json: { score: 90, isAcceptable: true, issues: [], suggestions: [] } };
      case 'TaskJudgement':
        return {
          json: {
            success: true,
            shouldContinue: false,
            shouldReplan: false,
            reason: 'meets the criteria',
          },
        };
      case 'AgentPlan':
        return { json: agentPlan };
      case 'AgentDecision':
        decisions += 1;
        // Paces a never-ending agent, so a cancelled run is not thousands of steps long.
        if (delayMs > 0) await new Promise((r) => setTimeout(r, delayMs));
        return { json: decide(decisions) };
      case 'AgentReflection':
        return {
          json: {
            status: 'success',
            evaluation: 'on track',
            plan_revision_needed: false,
            revision_reason: '',
            revision_changes: [],
          },
        };
      default:
        return { status: 400 };
    }
  };
}

function agentSession(server: FakeLlmServer, extra: Record<string, unknown> = {}) {
  return {
    llm: {
      default: {
        provider: 'openai',
        model: 'fake-model',
        baseUrl: server.baseUrl,
        maxRetries: 0,
        // The script answers AgentDecision replies (native function calls: executors-agent).
        toolCalling: 'structured',
        ...(extra.maxOutputTokens ? { maxOutputTokens: extra.maxOutputTokens } : {}),
      },
    },
    execution: {
      defaultExecutor: 'agent',
      workspaceRoot: join(tmp, 'ws'),
      ...((extra.execution as object | undefined) ?? {}),
    },
    ...(extra.budget ? { budget: extra.budget } : {}),
  };
}

const agentCalls = (server: FakeLlmServer) =>
  server.requests.filter((r) => r.schemaName.startsWith('Agent'));
const actionsOf = (history: HistoryEntry[]) =>
  history.filter((e) => e.type === 'action' && e.taskId === 't1');
const noActiveWork = async () =>
  (await cluster.pods[0]!.queues.get('work').getActiveCount()) === 0 ? true : undefined;

describe("the agent executor's own LLM calls", () => {
  it('are counted for the worker role and the task, like every other call', async () => {
    const server = await startFakeLlmServer(
      'openai',
      script((n) =>
        n === 1
          ? {
              kind: 'tool',
              tool: 'write_file',
              arguments: '{"path":"notes.txt","content":"notes"}',
              summary: '',
            }
          : { kind: 'done', tool: '', arguments: '{}', summary: 'notes.txt written' },
      ),
    );
    try {
      const session = await cluster.client.submit({
        instruction: 'Write the notes',
        config: agentSession(server),
      });
      const view = await cluster.client.wait(session.id, WAIT);
      expect(view.session.state).toBe('COMPLETED');

      const agent = agentCalls(server);
      expect(agent.map((r) => r.schemaName)).toEqual([
        'AgentPlan',
        'AgentDecision',
        'AgentDecision',
      ]);
      const { usage } = view;
      expect(usage.byRole.worker).toMatchObject({
        calls: 3,
        inputTokens: 3 * FAKE_USAGE.input,
        outputTokens: 3 * FAKE_USAGE.output,
      });
      // The task's share: the three agent calls and its one judgement.
      expect(usage.byTask.t1).toMatchObject({ calls: 4, inputTokens: 4 * FAKE_USAGE.input });
      expect(usage.total.calls).toBe(server.requests.length);
    } finally {
      await server.close();
    }
  });

  it('reserve the budget first: the session ends BUDGET_EXHAUSTED and no call starts past it', async () => {
    // A never-ending agent, against a server that bills what it got and what it answered.
    let billed = 0;
    const answer = script(() => listFiles);
    const server = await startFakeLlmServer('openai', async (request) => {
      const reply = await answer(request);
      if (!('json' in reply)) return reply;
      const usage = {
        input: await countTokens(request.text),
        output: await countTokens(JSON.stringify(reply.json)),
      };
      billed += usage.input + usage.output;
      return { ...reply, usage };
    });
    try {
      const maxTokens = 12_000;
      const session = await cluster.client.submit({
        instruction: 'Write the notes',
        config: agentSession(server, {
          budget: { maxTokens },
          execution: { maxAgentActions: 50 },
          maxOutputTokens: 300,
        }),
      });
      const view = await cluster.client.wait(session.id, WAIT);
      expect(view.session.state).toBe('BUDGET_EXHAUSTED');
      expect(view.session.failure?.reason).toMatch(/worker call Agent\w+ for task t1/);

      const { usage } = view;
      // Every request the server saw was granted first; the refused call never went out.
      expect(server.requests.slice(0, 3).map((r) => r.schemaName)).toEqual([
        'PlanBreakdown',
        'QualityJudgement',
        'AgentPlan',
      ]);
      expect(usage.grants).toBe(server.requests.length);
      expect(usage.exhausted).toEqual({ limit: 'tokens', afterGrants: usage.grants });
      expect(usage.denied).toBeGreaterThanOrEqual(1);
      expect(usage.total.inputTokens + usage.total.outputTokens).toBe(billed);
      expect(billed).toBeLessThanOrEqual(maxTokens);
      expect(usage.byRole.worker?.calls).toBe(agentCalls(server).length);
      expect(usage.byTask.t1?.calls).toBe(agentCalls(server).length);
      expect(usage.reserved.tokens).toBe(0);
    } finally {
      await server.close();
    }
  });
});

describe('cancelling a session', () => {
  it('stops a running agent loop between steps, long before its action budget', async () => {
    const maxAgentActions = 1000;
    const server = await startFakeLlmServer(
      'openai',
      script(() => listFiles, 20),
    );
    try {
      const session = await cluster.client.submit({
        instruction: 'Write the notes',
        config: agentSession(server, { execution: { maxAgentActions } }),
      });
      await eventually(
        async () =>
          actionsOf(await historyOf(cluster.client, session.id)).length >= 2 ? true : undefined,
        'the agent to act',
        20_000,
      );
      await cluster.client.cancel(session.id, 'test cancels');
      // The worker's job ends: the loop stopped, so no further step can be recorded.
      await eventually(noActiveWork, 'the agent run to stop', 15_000);

      expect((await cluster.client.get(session.id)).session.state).toBe('CANCELLED');
      const history = await historyOf(cluster.client, session.id);
      const actions = actionsOf(history).length;
      expect(actions).toBeGreaterThanOrEqual(2);
      expect(actions).toBeLessThan(maxAgentActions);
      // Each decision became an action but at most one, cut short: no call after the stop.
      const decisions = agentCalls(server).filter((r) => r.schemaName === 'AgentDecision');
      expect(decisions.length).toBeLessThanOrEqual(actions + 1);
      // The stopped run handed nothing to the judge.
      expect(history.some((e) => e.type === 'execution' && e.taskId === 't1')).toBe(false);
    } finally {
      await server.close();
    }
  });

  it('kills a running coding-agent command long before its timeout', async () => {
    const repo = join(tmp, 'repo');
    mkdirSync(repo);
    const git = (args: string[]) =>
      execFileSync(
        'git',
        [
          '-c',
          'user.name=t',
          '-c',
          'user.email=t@example.com',
          '-c',
          'init.defaultBranch=main',
        ].concat(args),
        { cwd: repo, encoding: 'utf8' },
      );
    git(['init', '-q']);
    writeFileSync(join(repo, 'README.md'), '# project\n');
    git(['add', '-A']);
    git(['commit', '-q', '-m', 'initial']);
    const pids = join(tmp, 'pids');
    mkdirSync(pids);
    const session = await cluster.client.submit({
      instruction: 'Write the parser',
      config: {
        execution: {
          defaultExecutor: 'command',
          workspaceRoot: join(tmp, 'command-ws'),
          command: {
            template: [
              process.execPath,
              FAKE_AGENT,
              '--hang',
              '--pidfile',
              join(pids, '{{taskId}}.pid'),
              '{{prompt}}',
            ],
            repository: repo,
            timeoutSeconds: 600,
          },
        },
      },
    });
    const pid = await eventually(
      () => {
        const [file] = readdirSync(pids);
        const text = file ? readFileSync(join(pids, file), 'utf8') : '';
        return text ? Number(text) : undefined;
      },
      'the coding agent to start',
      20_000,
    );
    expect(isAlive(pid)).toBe(true);
    await cluster.client.cancel(session.id, 'test cancels');

    await eventually(() => (isAlive(pid) ? undefined : true), 'the agent to be killed', 15_000);
    await eventually(noActiveWork, 'the worker job to end', 15_000);
    expect((await cluster.client.get(session.id)).session.state).toBe('CANCELLED');
    // The task's worktree went with it.
    expect(git(['worktree', 'list', '--porcelain']).match(/^worktree /gm)).toHaveLength(1);
  });
});

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}
