import { inAgentSpan } from '../../llm/genai.js';
import type { TaskResult } from '../../../shared/domain/task.js';
import { roleConfig } from '../../../shared/config/roles.js';
import { taskPrompt } from '../prompt.js';
import type { Executor, ExecutorContext } from '../types.js';
import { ensureTaskWorkspace } from '../workspace-dir.js';
import { createBuiltinAgentModel } from './builtin-model.js';
import { restoreRun } from './journal.js';
import { llmAgentModel } from './llm-model.js';
import { runAgentLoop, type AgentRunOutcome } from './loop.js';
import { connectMcpServers } from './tools/mcp.js';
import { sandboxFor } from '../sandbox.js';
import { Toolbox } from './tools/toolbox.js';
import { createWorkspaceTools } from './tools/workspace.js';
import type { AgentModel, AgentTurn } from './types.js';

/** Picks the agent model for one execution (the adapter point for real LLMs). */
export type AgentModelFactory = (ctx: ExecutorContext) => AgentModel | Promise<AgentModel>;

export interface AgentExecutorOptions {
  /** Overrides the model chosen from the session's worker llm config (tests, embedding). */
  model?: AgentModelFactory;
}

/**
 * The session's agent model: fixed rules for provider `builtin`, else the worker's LLM
 * (OpenAI-compatible or Anthropic) through llm-model.ts.
 */
export const defaultAgentModel: AgentModelFactory = (ctx) =>
  roleConfig(ctx.session.config.llm, 'worker').provider === 'builtin'
    ? createBuiltinAgentModel()
    : llmAgentModel(ctx);

function oneLine(text: string, max = 200): string {
  const line = text.replace(/\s+/g, ' ').trim();
  return line.length > max ? `${line.slice(0, max)}…` : line;
}

function describeTurn(turn: AgentTurn): string {
  switch (turn.kind) {
    case 'action':
      return `#${turn.step} ${turn.tool} ${oneLine(JSON.stringify(turn.input) ?? '', 120)} → ${
        turn.error !== undefined
          ? `error: ${oneLine(turn.error)}`
          : `ok: ${oneLine(turn.output ?? '')}`
      }`;
    case 'reflection':
      return `#${turn.step} reflection (${turn.trigger ?? 'resumed'}): ${turn.reflection.status}, ${oneLine(
        turn.reflection.evaluation,
      )}${turn.reflection.plan_revision_needed ? ' — revision needed' : ''}`;
    case 'revision':
      return `#${turn.step} revision: ${oneLine(turn.reason)}`;
  }
}

function resultOf(
  outcome: AgentRunOutcome,
  header: string[],
  root: string,
  started: number,
): TaskResult {
  const files = [
    ...new Set(
      outcome.transcript.flatMap((t) =>
        t.kind === 'action' && t.tool === 'write_file' && t.error === undefined
          ? [String((t.input as { path?: unknown }).path ?? '')]
          : [],
      ),
    ),
  ].filter((p) => p !== '');
  const log = [
    ...header,
    ...(outcome.plan
      ? [
          `plan: ${oneLine(outcome.plan.goal_understanding.main_objective)}; subtasks: ${
            outcome.plan.task_decomposition.subtasks.map((s) => s.id).join(', ') || '(none)'
          }`,
        ]
      : ['plan: none (planning disabled)']),
    ...outcome.transcript.map(describeTurn),
    `${outcome.finished ? 'done' : 'stopped'} after ${outcome.counters.actions} action(s), ${outcome.counters.reflections} reflection(s), ${outcome.counters.revisions} revision(s)`,
  ].join('\n');
  return {
    output: outcome.summary,
    log,
    artifacts: [
      { kind: 'workspace', path: root },
      ...files.map((path) => ({ kind: 'file', path })),
    ],
    tokenUsage: outcome.usage,
    durationMs: Date.now() - started,
    ...(outcome.finished ? {} : { error: outcome.summary }),
  };
}

/** Seed 004 inside a task: a planning/reflecting agent acting through workspace and MCP tools. */
export function createAgentExecutor(options: AgentExecutorOptions = {}): Executor {
  return {
    name: 'agent',
    async execute(ctx) {
      const started = Date.now();
      const { execution, planning } = ctx.session.config;
      const root = await ensureTaskWorkspace(execution.workspaceRoot, ctx.session.id, ctx.task.id);
      const model = await (options.model ?? defaultAgentModel)(ctx);
      const timeoutMs = execution.toolTimeoutSeconds * 1000;
      const sandbox = sandboxFor(execution.toolSandbox);
      const workspaceTools = createWorkspaceTools({
        root,
        timeoutMs,
        sandbox,
        maxOutputBytes: execution.toolMaxOutputBytes,
        ...(execution.commandAllowlist ? { commandAllowlist: execution.commandAllowlist } : {}),
      });
      const mcp = await connectMcpServers(execution.mcpServers, {
        cwd: root,
        timeoutMs,
        maxOutputBytes: execution.toolMaxOutputBytes,
        logger: ctx.logger,
      });
      try {
        const toolbox = new Toolbox([...workspaceTools, ...mcp.tools], { timeoutMs });
        const records = await ctx.history.load();
        const state = restoreRun(records, planning);
        const header = [
          `agent executor: task ${ctx.task.id}, attempt ${ctx.attempt}, workspace ${root}`,
          `model: ${model.label}; tools: ${[...toolbox.specs.map((t) => t.name), ...(execution.askHuman ? ['ask_human'] : [])].join(', ')}`,
          `command sandbox: ${'error' in sandbox ? sandbox.error : sandbox.describe}`,
          ...mcp.problems,
          ...(records.length > 0 ? [`resumed after ${records.length} recorded step(s)`] : []),
        ];
        const outcome = await inAgentSpan(
          'orq-agent',
          {
            'gen_ai.request.model': model.label,
            'orq.task.id': ctx.task.id,
            'orq.session.id': ctx.session.id,
          },
          () =>
            runAgentLoop(
              {
                model,
                toolbox,
                history: ctx.history,
                request: {
                  sessionId: ctx.session.id,
                  jobAttempt: ctx.jobAttempt,
                  task: ctx.task,
                  instruction: ctx.session.instruction,
                  attempt: ctx.attempt,
                  dependencyResults: ctx.dependencyResults,
                  ...(ctx.feedback ? { feedback: ctx.feedback } : {}),
                  prompt: taskPrompt(ctx),
                  planning,
                },
                maxActions: execution.maxAgentActions,
                signal: ctx.signal,
                ...(ctx.confirmCurrent ? { confirmCurrent: ctx.confirmCurrent } : {}),
                logger: ctx.logger,
                stepRules: ctx.session.config.approval.steps,
                askHuman: execution.askHuman,
                root,
                ...(ctx.stepDecision ? { decision: ctx.stepDecision } : {}),
              },
              state,
            ),
        );
        return resultOf(outcome, header, root, started);
      } finally {
        await mcp.close();
      }
    },
  };
}
