import { tracedChat, type ModelCallEvents } from './genai.js';
import { z } from 'zod';
import type { LlmRecordConfig, LlmRoleConfig } from '../../shared/config/schema.js';
import {
  PlanBreakdown,
  QualityJudgementAnswer,
  ReplanBreakdown,
  type QualityJudgement,
} from '../../shared/domain/plan.js';
import {
  TaskJudgementAnswer,
  type TaskJudgement,
  type TaskResult,
  type TokenUsage,
} from '../../shared/domain/task.js';
import { OrqError } from '../../shared/errors.js';
import { createAnthropicProvider } from './anthropic-provider.js';
import type { ChatProvider, ChatRequest } from './chat.js';
import { type ModelRole, outputCap } from '../../shared/config/roles.js';
import { countHttpAttempts } from './http-attempt-counts.js';
import type { HttpAttemptEvents } from './http-attempts.js';
import { createOpenAiProvider } from './openai-provider.js';
import { TOP_LOGPROBS, weightedScore } from './score-logprobs.js';
import {
  executorPrompt,
  outputFormat,
  plannerPrompt,
  planJudgePrompt,
  replannerPrompt,
  taskJudgePrompt,
  type Prompt,
} from './prompts.js';
import type { ProviderQuotas } from './quota.js';
import { withRecordReplay } from './record-replay.js';
import {
  callStructured,
  formatIssues,
  replyJsonSchema,
  type StructuredReply,
} from './structured.js';
import { estimateInputTokens } from './token-estimate.js';
import type {
  CallContext,
  ModelCall,
  ModelCallRequests,
  ExecuteRequest,
  ModelReply,
  PlanJudgeRequest,
  PlanRequest,
  ReplanRequest,
  RoleModels,
  TaskJudgeRequest,
} from './types.js';
import type { CallEstimate } from '../../shared/budget.js';

/** What the worker's model answers for one task; becomes TaskResult.output and .log. */
export const TaskOutput = z.object({
  output: z.string().min(1),
  log: z.string().default(''),
});
export type TaskOutput = z.infer<typeof TaskOutput>;

export type LlmRoleConfigs = Partial<Record<ModelRole, LlmRoleConfig>>;

export interface LlmModelsOptions {
  /** Repair turns for a reply that fails its schema (llm.maxRepairAttempts). */
  maxRepairAttempts: number;
  /** llm.record: record every call, or answer from a recording. */
  record?: LlmRecordConfig;
  /** Where API keys are read from; process.env by default. */
  env?: NodeJS.ProcessEnv;
  /** Builds a role's provider (custom providers); the SDK providers by default. */
  createProvider?: (role: ModelRole, config: LlmRoleConfig, env: NodeJS.ProcessEnv) => ChatProvider;
  /** Enforces each role's rateLimit (issue 33); without it rateLimit is not enforced. */
  quotas?: ProviderQuotas;
  /** Told when a role falls back to prompt-mode structured output (to log it). */
  onFormatFallback?: (fallback: FormatFallback) => void;
  /** Told of every HTTP request of the calls, retries included (a pod's metrics). */
  httpAttempts?: HttpAttemptEvents;
  /**
   * llm.judgeSamples.logprobScores: the plan judge's score is the expected value over its score
   * token's log-probabilities, where the server returns them (score-logprobs.ts).
   */
  logprobScores?: boolean;
  /** Told of every model call, with its tokens and duration (a pod's gen_ai metrics). */
  modelCalls?: ModelCallEvents;
}

/** A role whose server ignored structured output now gets the schema in its prompt instead. */
export interface FormatFallback {
  role: ModelRole;
  schemaName: string;
  sessionId: string;
  /** What was wrong with the reply that showed it. */
  issues: string;
}

/** The SDK provider a role's config names. */
export function createChatProvider(
  role: ModelRole,
  config: LlmRoleConfig,
  env: NodeJS.ProcessEnv = process.env,
): ChatProvider {
  switch (config.provider) {
    case 'openai':
      return createOpenAiProvider(role, config, env);
    case 'anthropic':
      return createAnthropicProvider(role, config, env);
    case 'builtin':
      throw new OrqError('CONFIG_INVALID', `The ${role} uses the builtin provider, not an LLM`, {
        details: { role },
      });
  }
}

/**
 * RoleModels over real models: each method renders its role's prompt, makes one structured
 * call (with repair) on that role's provider, and returns the validated value with the tokens
 * spent. plan → planner, judgePlan/judgeTask → judge, execute → worker, replan → replanner.
 * Providers are created on first use, so a role that is never called needs no key.
 */
export function createLlmModels(
  roleConfigs: LlmRoleConfigs,
  options: LlmModelsOptions,
): RoleModels {
  const env = options.env ?? process.env;
  const build = options.createProvider ?? createChatProvider;
  const providers = new Map<ModelRole, ChatProvider>();
  /**
   * Roles in native mode whose server ignored the format (structured.ts ignoredFormat): their
   * later calls are made in prompt mode, with the schema in the prompt and no response_format.
   */
  const promptFallback = new Set<ModelRole>();

  function configOf(role: ModelRole): LlmRoleConfig {
    const config = roleConfigs[role];
    if (!config || config.provider === 'builtin') {
      throw new OrqError('CONFIG_INVALID', `No LLM is configured for the ${role}`, {
        hint: `Set llm.${role}.provider (or llm.default.provider) to openai or anthropic`,
        details: { role },
      });
    }
    if (config.model === 'builtin') {
      throw new OrqError(
        'CONFIG_INVALID',
        `The ${role} uses provider ${config.provider} but no model is named`,
        { hint: `Set llm.${role}.model (or llm.default.model)`, details: { role } },
      );
    }
    return config;
  }

  function providerOf(role: ModelRole): ChatProvider {
    let provider = providers.get(role);
    if (provider) return provider;
    const config = configOf(role);
    const record = options.record;
    // Only calls that reach the provider spend its quota: a replay does not.
    const { quotas, httpAttempts } = options;
    const real = () => {
      const built = build(role, config, env);
      const gated = quotas ? quotas.gate(built, role, config, env) : built;
      // Outside the gate: its second try of a call after a 429 is a retry too.
      return httpAttempts
        ? countHttpAttempts(
            gated,
            { provider: config.provider, model: config.model, role },
            httpAttempts,
          )
        : gated;
    };
    const traced = (inner: ChatProvider) =>
      tracedChat(
        inner,
        { provider: config.provider, model: config.model, role, baseUrl: config.baseUrl },
        options.modelCalls,
      );
    provider =
      record && record.mode !== 'off'
        ? withRecordReplay({
            mode: record.mode,
            path: record.path,
            provider: config.provider,
            model: config.model,
            inner: () => traced(real()),
          })
        : traced(real());
    providers.set(role, provider);
    return provider;
  }

  /** The role's structured-output mode: its config's, or prompt after a fallback. */
  function modeOf(role: ModelRole): LlmRoleConfig['structuredOutput'] {
    return promptFallback.has(role) ? 'prompt' : configOf(role).structuredOutput;
  }

  /** In native mode the provider enforces the schema; otherwise the prompt must show it. */
  function formatFor(role: ModelRole, schema: z.ZodType, schemaName: string): string {
    const native = modeOf(role) === 'native';
    return outputFormat(
      schemaName,
      native ? undefined : replyJsonSchema(schema, { strict: false }),
    );
  }

  /** One role's structured call: its schema and the prompt rendered for the request. */
  interface RoleCall<T extends z.ZodType> {
    role: ModelRole;
    schema: T;
    schemaName: string;
    prompt: Prompt;
  }

  function roleCall<T extends z.ZodType>(
    role: ModelRole,
    schema: T,
    schemaName: string,
    render: (format: string) => Prompt,
  ): RoleCall<T> {
    return { role, schema, schemaName, prompt: render(formatFor(role, schema, schemaName)) };
  }

  const calls = {
    plan: (r: PlanRequest) =>
      roleCall('planner', PlanBreakdown, 'PlanBreakdown', (f) => plannerPrompt(r, f)),
    judgePlan: (r: PlanJudgeRequest) =>
      roleCall('judge', QualityJudgementAnswer, 'QualityJudgement', (f) => planJudgePrompt(r, f)),
    execute: (r: ExecuteRequest) =>
      roleCall('worker', TaskOutput, 'TaskOutput', (f) => executorPrompt(r, f)),
    judgeTask: (r: TaskJudgeRequest) =>
      roleCall('judge', TaskJudgementAnswer, 'TaskJudgement', (f) => taskJudgePrompt(r, f)),
    replan: (r: ReplanRequest) =>
      roleCall('replanner', ReplanBreakdown, 'ReplanBreakdown', (f) => replannerPrompt(r, f)),
  } satisfies { [M in ModelCall]: (r: ModelCallRequests[M]) => RoleCall<z.ZodType> };

  function ask<T extends z.ZodType>(
    { role, schema, schemaName, prompt }: RoleCall<T>,
    context: CallContext,
    sample?: number,
    topLogprobs?: number,
  ): Promise<StructuredReply<z.infer<T>>> {
    const config = configOf(role);
    const mode = modeOf(role);
    return callStructured(
      providerOf(role),
      {
        role,
        ...prompt,
        schema,
        schemaName,
        temperature: config.temperature,
        timeoutMs: config.timeoutSeconds * 1000,
        ...(context.signal ? { signal: context.signal } : {}),
        ...(sample !== undefined ? { sample } : {}),
        ...(topLogprobs ? { topLogprobs } : {}),
        ...(mode !== config.structuredOutput ? { structuredOutput: mode } : {}),
      },
      {
        maxRepairAttempts: options.maxRepairAttempts,
        ...(context.reserveTurn
          ? {
              beforeRepairTurn: async (turn: ChatRequest, spent: TokenUsage) =>
                context.reserveTurn?.(
                  {
                    inputTokens: await estimateInputTokens(turn, config),
                    maxOutputTokens: outputCap(config),
                  },
                  spent,
                ),
            }
          : {}),
        structuredOutput: mode,
        onFormatIgnored: ({ issues }) => {
          if (promptFallback.has(role)) return;
          promptFallback.add(role);
          options.onFormatFallback?.({
            role,
            schemaName,
            sessionId: context.sessionId,
            issues: formatIssues(issues),
          });
        },
      },
    );
  }

  const label = `llm (${(['planner', 'judge', 'worker', 'replanner'] as const)
    .map((role) => {
      const config = roleConfigs[role];
      return `${role} ${config && config.provider !== 'builtin' ? `${config.provider}:${config.model}` : 'builtin'}`;
    })
    .join(', ')})`;

  return {
    label,

    async estimate<M extends ModelCall>(
      call: M,
      request: ModelCallRequests[M],
    ): Promise<CallEstimate> {
      const make = calls[call] as (r: ModelCallRequests[M]) => RoleCall<z.ZodType>;
      const { role, schema, prompt } = make(request);
      const config = configOf(role);
      return {
        inputTokens: await estimateInputTokens({ ...prompt, schema }, config),
        maxOutputTokens: outputCap(config),
      };
    },

    async plan(request: PlanRequest): Promise<ModelReply<PlanBreakdown>> {
      const reply = await ask(calls.plan(request), request);
      return { value: reply.value, usage: reply.usage };
    },

    async judgePlan(request: PlanJudgeRequest): Promise<ModelReply<QualityJudgement>> {
      // The model is shown and checked against only what it answers; orq adds samples later.
      const topLogprobs = options.logprobScores ? TOP_LOGPROBS : undefined;
      const reply = await ask(calls.judgePlan(request), request, request.sample, topLogprobs);
      // Without log-probabilities (not asked, or the server returned none) the stated score stands.
      const weighted = reply.tokenLogprobs ? weightedScore(reply.tokenLogprobs) : undefined;
      if (!weighted || weighted.stated !== reply.value.score) {
        return { value: reply.value, usage: reply.usage };
      }
      return {
        value: {
          ...reply.value,
          score: weighted.score,
          scoreWeighting: { stated: weighted.stated, mass: weighted.mass },
        },
        usage: reply.usage,
      };
    },

    async execute(request: ExecuteRequest): Promise<TaskResult> {
      const started = Date.now();
      const reply = await ask(calls.execute(request), request);
      const model = configOf('worker');
      const notes = [
        `model ${model.provider}:${model.model}, execution ${request.attempt}` +
          (reply.repairs > 0 ? `, ${reply.repairs} repair turn(s)` : '') +
          (reply.formatIgnored
            ? '; its server ignored structured output, so the worker now puts the schema in the prompt (llm.worker.structuredOutput "prompt")'
            : ''),
        reply.value.log,
      ];
      return {
        output: reply.value.output,
        log: notes.filter((line) => line.trim() !== '').join('\n'),
        artifacts: [],
        tokenUsage: reply.usage,
        durationMs: Date.now() - started,
      };
    },

    async judgeTask(request: TaskJudgeRequest): Promise<ModelReply<TaskJudgement>> {
      // Each opinion of confirmTaskVerdicts is a request of its own (recorder keys them apart).
      const reply = await ask(calls.judgeTask(request), request, request.sample);
      return { value: reply.value, usage: reply.usage };
    },

    async replan(request: ReplanRequest): Promise<ModelReply<ReplanBreakdown>> {
      const reply = await ask(calls.replan(request), request);
      return { value: reply.value, usage: reply.usage };
    },
  };
}
