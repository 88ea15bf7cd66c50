import { z } from 'zod';
import type { LlmRoleConfig } from '../../../shared/config/schema.js';
import { ToolCallReply, type ChatProvider, type ChatTool } from '../../llm/chat.js';
import { createChatProvider } from '../../llm/llm-models.js';
import { outputFormat } from '../../llm/prompts.js';
import { withRecordReplay } from '../../llm/record-replay.js';
import { callStructured, replyJsonSchema } from '../../llm/structured.js';
import type { ModelReply } from '../../llm/types.js';
import { roleConfig } from '../../../shared/config/roles.js';
import type { ExecutorContext } from '../types.js';
import type {
  AgentActRequest,
  AgentDecision,
  AgentModel,
  AgentPlan,
  AgentReflection,
  AgentReflectRequest,
  AgentRunRequest,
  AgentTurn,
} from './types.js';

/*
 * What a real model is asked for in each phase of seed 004. The schemas use strings, booleans,
 * enums and arrays only, so they pass OpenAI's strict structured-output mode and Anthropic's
 * forced tool. A tool call goes through the provider's function calling (toolCalling native:
 * every tool with its own input schema, and DONE_TOOL), or is one structured reply naming the
 * tool with its arguments as a JSON object in a string (toolCalling structured).
 */
const LlmPlan = z.object({
  goal_understanding: z.object({
    main_objective: z.string(),
    success_criteria: z.array(z.string()),
    constraints: z.array(z.string()),
  }),
  task_decomposition: z.object({
    reasoning: z.string().describe('Chain-of-thought: how the task breaks down, step by step.'),
    subtasks: z.array(
      z.object({
        id: z.string(),
        description: z.string(),
        dependencies: z.array(z.string()),
        complexity: z.enum(['low', 'medium', 'high']),
      }),
    ),
  }),
  action_plan: z.object({
    execution_order: z.array(z.string()).describe('Subtask ids in the order to do them.'),
    actions: z.array(z.string()).describe('The tool calls planned, in words.'),
  }),
  comment: z.string(),
});

const LlmDecision = z.object({
  kind: z.enum(['tool', 'done']),
  tool: z.string().describe('The tool to call when kind is "tool"; empty when done.'),
  arguments: z
    .string()
    .describe(
      'The tool input as a JSON object matching its input schema, e.g. {"path":"a.txt"}; "{}" when done.',
    ),
  summary: z.string().describe('When done: what was achieved (this becomes the task output).'),
});

const LlmReflection = z.object({
  status: z.enum(['success', 'failure', 'partial']),
  evaluation: z.string(),
  plan_revision_needed: z.boolean(),
  revision_reason: z.string().describe('Why the plan changes; empty when no revision is needed.'),
  revision_changes: z.array(z.string()),
  revised_plan: LlmPlan.optional().describe('The whole new plan, when the plan changes.'),
});

/**
 * With native function calling, saying the task is done is a tool call too: this one, offered
 * next to the agent's tools. (A tool of the agent with the same name is shadowed by it.)
 */
export const DONE_TOOL: ChatTool = {
  name: 'orq_task_done',
  description:
    "Call when the task's acceptance criteria are met: the summary of what you did becomes the task's output.",
  inputSchema: {
    type: 'object',
    properties: { summary: { type: 'string', description: 'What was achieved.' } },
    required: ['summary'],
  },
};

/** The tools offered natively: the agent's, then DONE_TOOL. */
function nativeTools(request: AgentActRequest): ChatTool[] {
  return [
    ...request.tools
      .filter((t) => t.name !== DONE_TOOL.name)
      .map((t) => ({ name: t.name, description: t.description, inputSchema: t.inputSchema })),
    DONE_TOOL,
  ];
}

/** Turns of the transcript shown to the model; older ones are summarised by count. */
const MAX_TURNS_SHOWN = 30;
const MAX_OBSERVATION_CHARS = 2000;

function clip(text: string, max = MAX_OBSERVATION_CHARS): string {
  return text.length > max
    ? `${text.slice(0, max)} [... ${text.length - max} more characters]`
    : text;
}

function systemPrompt(request: AgentRunRequest): string {
  return [
    'You are an autonomous agent carrying out one task of a larger plan, in phases:',
    '1. Planning (once): understand the goal, break the task into subtasks with dependencies,',
    '   and decide the order of actions.',
    '2. Execution: act through the tools listed, one tool call per reply.',
    `3. Reflection: after an error${request.planning.reflection.trigger_on_error ? '' : ' (if asked)'} and every ${request.planning.reflection.trigger_interval} actions,`,
    '   evaluate the progress honestly and say whether the plan must change.',
    "When the task's acceptance criteria are met, reply done with a summary of what you did.",
    'Every path is relative to your workspace; nothing outside it can be reached.',
  ].join('\n');
}

function turnText(turn: AgentTurn): string {
  switch (turn.kind) {
    case 'action':
      return `[${turn.step}] called ${turn.tool} ${JSON.stringify(turn.input)}\n${
        turn.error !== undefined
          ? `ERROR: ${clip(turn.error)}`
          : `result: ${clip(turn.output ?? '')}`
      }`;
    case 'reflection':
      return `[${turn.step}] reflection: ${turn.reflection.status}: ${turn.reflection.evaluation}`;
    case 'revision':
      return `[${turn.step}] plan revised: ${turn.reason} ${JSON.stringify(turn.changes)}`;
  }
}

function contextText(request: AgentActRequest): string {
  const shown = request.transcript.slice(-MAX_TURNS_SHOWN);
  const hidden = request.transcript.length - shown.length;
  return [
    request.prompt,
    '',
    'Tools:',
    ...request.tools.map(
      (t) => `- ${t.name}: ${t.description}\n  input schema: ${JSON.stringify(t.inputSchema)}`,
    ),
    '',
    `Current plan: ${request.plan ? JSON.stringify(request.plan) : '(none: act directly)'}`,
    '',
    'What you did so far:',
    ...(hidden > 0 ? [`(${hidden} earlier steps not shown)`] : []),
    ...(shown.length > 0 ? shown.map(turnText) : ['(nothing yet)']),
    '',
    `Tool calls left: ${request.actionsLeft}`,
  ].join('\n');
}

export interface ChatAgentModelOptions {
  provider: ChatProvider;
  config: LlmRoleConfig;
  maxRepairAttempts: number;
}

/** An AgentModel over a real LLM (OpenAI-compatible or Anthropic, through chat.ts providers). */
export function createChatAgentModel(options: ChatAgentModelOptions): AgentModel {
  const { provider, config } = options;
  const format = (schema: z.ZodType, name: string) =>
    outputFormat(
      name,
      config.structuredOutput === 'native' ? undefined : replyJsonSchema(schema, { strict: false }),
    );

  async function ask<T extends z.ZodType>(
    schema: T,
    schemaName: string,
    request: AgentRunRequest,
    user: string,
    tools?: ChatTool[],
  ): Promise<ModelReply<z.infer<T>>> {
    const reply = await callStructured(
      provider,
      {
        role: 'worker',
        system: systemPrompt(request),
        // The tools' own schemas say what to send; a reply format would contradict them.
        user: tools ? user : `${user}\n\n${format(schema, schemaName)}`,
        schema,
        schemaName,
        temperature: config.temperature,
        timeoutMs: config.timeoutSeconds * 1000,
        ...(request.signal ? { signal: request.signal } : {}),
        ...(tools ? { tools } : {}),
      },
      { maxRepairAttempts: options.maxRepairAttempts, structuredOutput: config.structuredOutput },
    );
    return { value: reply.value, usage: reply.usage };
  }

  /** The next step through the provider's function calling: a tool call, or DONE_TOOL. */
  async function nativeAction(request: AgentActRequest): Promise<ModelReply<AgentDecision>> {
    const user = `${contextText(request)}\n\nPhase: execution. Call the next tool, or ${DONE_TOOL.name} when the task is done.`;
    const reply = await ask(ToolCallReply, 'AgentToolCall', request, user, nativeTools(request));
    const { tool, input } = reply.value;
    if (tool === DONE_TOOL.name) {
      const summary = typeof input.summary === 'string' ? input.summary : JSON.stringify(input);
      return { value: { done: true, summary }, usage: reply.usage };
    }
    return { value: { tool, input }, usage: reply.usage };
  }

  return {
    label: `agent ${provider.label}`,

    async plan(request): Promise<ModelReply<AgentPlan>> {
      const user = [
        request.prompt,
        '',
        `Tools you will have: ${request.tools.map((t) => t.name).join(', ')}`,
        '',
        `Phase: planning. Write the plan, with at most ${request.planning.max_subtasks} subtasks (${request.planning.decomposition_level} decomposition).`,
      ].join('\n');
      return ask(LlmPlan, 'AgentPlan', request, user);
    },

    async nextAction(request): Promise<ModelReply<AgentDecision>> {
      if (config.toolCalling === 'native') return nativeAction(request);
      const user = `${contextText(request)}\n\nPhase: execution. Call the next tool, or say done.`;
      const reply = await ask(LlmDecision, 'AgentDecision', request, user);
      const d = reply.value;
      if (d.kind === 'done')
        return { value: { done: true, summary: d.summary }, usage: reply.usage };
      let input: unknown;
      try {
        input = JSON.parse(d.arguments || '{}');
      } catch {
        // Invalid JSON arguments: the loop reports them to the model as an invalid decision.
        input = d.arguments;
      }
      return { value: { tool: d.tool, input } as AgentDecision, usage: reply.usage };
    },

    async reflect(request: AgentReflectRequest): Promise<ModelReply<AgentReflection>> {
      const user = [
        contextText(request),
        '',
        `Phase: reflection (${request.trigger === 'error' ? 'the last action failed' : `after ${request.planning.reflection.trigger_interval} actions`}).`,
        request.revisionsLeft > 0
          ? `You may revise the plan (${request.revisionsLeft} revision(s) left).`
          : 'No plan revision is left: adapt within the current plan.',
      ].join('\n');
      const reply = await ask(LlmReflection, 'AgentReflection', request, user);
      const r = reply.value;
      const reflection: AgentReflection = {
        status: r.status,
        evaluation: r.evaluation,
        plan_revision_needed: r.plan_revision_needed,
        ...(r.plan_revision_needed
          ? {
              plan_revision: {
                reason: r.revision_reason || r.evaluation,
                changes: r.revision_changes,
                ...(r.revised_plan ? { plan: r.revised_plan } : {}),
              },
            }
          : {}),
      };
      return { value: reflection, usage: reply.usage };
    },
  };
}

/** The agent model for a session whose worker uses a real provider. */
export function llmAgentModel(
  ctx: ExecutorContext,
  env: NodeJS.ProcessEnv = process.env,
): AgentModel {
  const config = roleConfig(ctx.session.config.llm, 'worker');
  const { record } = ctx.session.config.llm;
  // Calls that reach the provider spend its quota (issue 33); replayed ones do not.
  const real = () => {
    const built = createChatProvider('worker', config, env);
    return ctx.limitChat ? ctx.limitChat(built, config) : built;
  };
  // llm.record applies to agent runs too, so a real run replays as a deterministic test.
  const provider =
    record.mode === 'off'
      ? real()
      : withRecordReplay({
          mode: record.mode,
          path: record.path,
          provider: config.provider,
          model: config.model,
          inner: real,
        });
  return createChatAgentModel({
    // Metered outermost: a replayed call counts what the recording says it used.
    provider: ctx.meterChat(provider),
    config,
    maxRepairAttempts: ctx.session.config.llm.maxRepairAttempts,
  });
}
