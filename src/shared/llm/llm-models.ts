import { z } from 'zod';
import type { LlmRecordConfig, LlmRoleConfig } from '../config/schema.js';
import { PlanBreakdown, QualityJudgement, ReplanBreakdown } from '../domain/plan.js';
import { TaskJudgement, type TaskResult } from '../domain/task.js';
import { OrqError } from '../errors.js';
import { createAnthropicProvider } from './anthropic-provider.js';
import type { ChatProvider, ModelRole } from './chat.js';
import { createOpenAiProvider } from './openai-provider.js';
import {
  executorPrompt,
  outputFormat,
  plannerPrompt,
  planJudgePrompt,
  replannerPrompt,
  taskJudgePrompt,
  type Prompt,
} from './prompts.js';
import { withRecordReplay } from './record-replay.js';
import { callStructured, replyJsonSchema, type StructuredReply } from './structured.js';
import type {
  CallContext,
  ExecuteRequest,
  ModelReply,
  PlanJudgeRequest,
  PlanRequest,
  ReplanRequest,
  RoleModels,
  TaskJudgeRequest,
} from './types.js';

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
    provider =
      record && record.mode !== 'off'
        ? withRecordReplay({
            mode: record.mode,
            path: record.path,
            provider: config.provider,
            model: config.model,
            inner: () => build(role, config, env),
          })
        : build(role, config, env);
    providers.set(role, provider);
    return provider;
  }

  /** In native mode the provider enforces the schema; otherwise the prompt must show it. */
  function formatFor(role: ModelRole, schema: z.ZodType, schemaName: string): string {
    const native = configOf(role).structuredOutput === 'native';
    return outputFormat(
      schemaName,
      native ? undefined : replyJsonSchema(schema, { strict: false }),
    );
  }

  function ask<T extends z.ZodType>(
    role: ModelRole,
    schema: T,
    schemaName: string,
    prompt: Prompt,
    context: CallContext,
    sample?: number,
  ): Promise<StructuredReply<z.infer<T>>> {
    const config = configOf(role);
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
      },
      { maxRepairAttempts: options.maxRepairAttempts },
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

    async plan(request: PlanRequest): Promise<ModelReply<PlanBreakdown>> {
      const prompt = plannerPrompt(request, formatFor('planner', PlanBreakdown, 'PlanBreakdown'));
      const reply = await ask('planner', PlanBreakdown, 'PlanBreakdown', prompt, request);
      return { value: reply.value, usage: reply.usage };
    },

    async judgePlan(request: PlanJudgeRequest): Promise<ModelReply<QualityJudgement>> {
      const format = formatFor('judge', QualityJudgement, 'QualityJudgement');
      const prompt = planJudgePrompt(request, format);
      const reply = await ask(
        'judge',
        QualityJudgement,
        'QualityJudgement',
        prompt,
        request,
        request.sample,
      );
      return { value: reply.value, usage: reply.usage };
    },

    async execute(request: ExecuteRequest): Promise<TaskResult> {
      const started = Date.now();
      const prompt = executorPrompt(request, formatFor('worker', TaskOutput, 'TaskOutput'));
      const reply = await ask('worker', TaskOutput, 'TaskOutput', prompt, request);
      const model = configOf('worker');
      const notes = [
        `model ${model.provider}:${model.model}, execution ${request.attempt}` +
          (reply.repairs > 0 ? `, ${reply.repairs} repair turn(s)` : ''),
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
      const prompt = taskJudgePrompt(request, formatFor('judge', TaskJudgement, 'TaskJudgement'));
      const reply = await ask('judge', TaskJudgement, 'TaskJudgement', prompt, request);
      return { value: reply.value, usage: reply.usage };
    },

    async replan(request: ReplanRequest): Promise<ModelReply<ReplanBreakdown>> {
      const format = formatFor('replanner', ReplanBreakdown, 'ReplanBreakdown');
      const prompt = replannerPrompt(request, format);
      const reply = await ask('replanner', ReplanBreakdown, 'ReplanBreakdown', prompt, request);
      return { value: reply.value, usage: reply.usage };
    },
  };
}
