import { z } from 'zod';

/**
 * Every key and default of the seeds, validated. Objects are strict so a typo in a key is an
 * error that names it; `.prefault({})` lets an omitted section take its inner defaults.
 */

/** Seed 000 + 003 (refinement loop) and seed 002 (term preservation) share one object. */
export const RefinementConfig = z.strictObject({
  maxRefinementAttempts: z
    .number()
    .int()
    .min(0)
    .max(10)
    .default(2)
    .describe('Maximum number of replans of a plan (seed 000).'),
  refineSuggestionsOnSuccess: z
    .boolean()
    .default(false)
    .describe("Replan an acceptable plan to apply the judge's suggestions."),
  maxSuggestionReplans: z
    .number()
    .int()
    .min(0)
    .max(5)
    .default(1)
    .describe('Upper bound on replans made only to apply suggestions.'),
  enableIndividualFallback: z
    .boolean()
    .default(true)
    .describe(
      'When a replan breaks the structure, fall back to the previous plan instead of failing.',
    ),
  deltaThreshold: z
    .number()
    .min(0)
    .max(50)
    .default(5)
    .describe('Stagnation: an absolute score improvement below this counts as no progress.'),
  deltaThresholdPercent: z
    .number()
    .min(0)
    .max(100)
    .default(5)
    .describe('Stagnation: a relative score improvement (%) below this counts as no progress.'),
  taskCountChangeThreshold: z
    .number()
    .min(0)
    .max(1)
    .default(0.3)
    .describe('Structure break: relative change of the task count above this (with the minimum).'),
  taskCountChangeMinAbsolute: z
    .number()
    .int()
    .min(0)
    .max(10)
    .default(2)
    .describe('Structure break: the absolute task count change must also exceed this.'),
  noiseThreshold: z
    .number()
    .min(1)
    .max(10)
    .default(3)
    .describe('Score differences below this are judge noise: the plans count as equal (seed 003).'),
  stagnationPolicy: z
    .enum(['reject', 'replan-while-attempts-remain'])
    .default('reject')
    .describe(
      'Stagnation with an unacceptable plan: reject (seed 003, default) or keep replanning while attempts remain (seed 000 priority 3).',
    ),
  enableTermPreservationCheck: z
    .boolean()
    .default(true)
    .describe("Check that terms of the user's instruction survive replans (seed 002)."),
  treatTermLossAsStructureBreak: z
    .boolean()
    .default(false)
    .describe(
      'Treat a preservation rate below minPreservationRate as a structure break instead of a warning.',
    ),
  minPreservationRate: z
    .number()
    .min(0)
    .max(1)
    .default(0.8)
    .describe('Lowest share of required terms a replan must keep before warning or rejecting.'),
  customRequiredTerms: z
    .array(z.string().min(1))
    .default([])
    .describe('Terms that must survive every replan, in addition to the extracted ones.'),
  maxQualityRetries: z
    .number()
    .int()
    .min(0)
    .max(10)
    .optional()
    .describe(
      'Legacy name of maxRefinementAttempts; maxRefinementAttempts wins when both are set.',
    ),
});
export type RefinementConfig = z.infer<typeof RefinementConfig>;
export type RefinementConfigInput = z.input<typeof RefinementConfig>;

/** Seed 001: automatic re-decomposition of a task the judge says cannot succeed as designed. */
export const ReplanningConfig = z.strictObject({
  enabled: z.boolean().default(true).describe('Let the Replanner split failing tasks.'),
  maxIterations: z
    .number()
    .int()
    .min(0)
    .max(20)
    .default(3)
    .describe('Replans along one chain of tasks before the task is BLOCKED.'),
  timeoutSeconds: z
    .number()
    .int()
    .min(1)
    .max(86_400)
    .default(300)
    .describe('Time limit of one Replanner call.'),
});
export type ReplanningConfig = z.infer<typeof ReplanningConfig>;

export const ExecutionConfig = z.strictObject({
  maxContinuations: z
    .number()
    .int()
    .min(0)
    .max(50)
    .default(3)
    .describe('Times the judge may send a task back with feedback before it is BLOCKED.'),
  defaultExecutor: z
    .string()
    .min(1)
    .default('llm')
    .describe('Executor a worker uses when the task names none.'),
});
export type ExecutionConfig = z.infer<typeof ExecutionConfig>;

/** Seed 004's `planning:` section; key names kept as the seed writes them. */
export const PlanningConfig = z.strictObject({
  enabled: z.boolean().default(true),
  strategy: z.enum(['chain_of_thought']).default('chain_of_thought'),
  max_subtasks: z.number().int().min(1).max(1000).default(100),
  decomposition_level: z.enum(['coarse', 'moderate', 'fine']).default('moderate'),
  reflection: z
    .strictObject({
      enabled: z.boolean().default(true),
      trigger_on_error: z.boolean().default(true),
      trigger_interval: z.number().int().min(1).max(100).default(3),
    })
    .prefault({}),
  revision: z
    .strictObject({
      max_revisions: z.number().int().min(0).max(50).default(3),
    })
    .prefault({}),
  history: z
    .strictObject({
      storage_type: z
        .enum(['redis', 'jsonl'])
        .default('redis')
        .describe(
          'redis: the per-session stream only (the cluster-safe default, DESIGN.md); jsonl: also append to files.',
        ),
      directory: z.string().min(1).default('planning_history'),
    })
    .prefault({}),
});
export type PlanningConfig = z.infer<typeof PlanningConfig>;

export const LlmProviderName = z.enum(['builtin', 'openai', 'anthropic']);
export type LlmProviderName = z.infer<typeof LlmProviderName>;

const llmRoleShape = {
  provider: LlmProviderName.describe('builtin is deterministic and offline (tests, demo).'),
  model: z.string().min(1),
  temperature: z.number().min(0).max(2),
  timeoutSeconds: z.number().min(1).max(3600),
  baseUrl: z.url().describe('OpenAI-compatible servers: Ollama, vLLM, LM Studio.'),
  apiKeyEnv: z.string().min(1).describe('Name of the environment variable holding the API key.'),
  maxRetries: z.number().int().min(0).max(10),
};

export const LlmRoleConfig = z.strictObject({
  provider: llmRoleShape.provider.default('builtin'),
  model: llmRoleShape.model.default('builtin'),
  temperature: llmRoleShape.temperature.default(0),
  timeoutSeconds: llmRoleShape.timeoutSeconds.default(120),
  baseUrl: llmRoleShape.baseUrl.optional(),
  apiKeyEnv: llmRoleShape.apiKeyEnv.optional(),
  maxRetries: llmRoleShape.maxRetries.default(2),
});
export type LlmRoleConfig = z.infer<typeof LlmRoleConfig>;

const LlmRoleOverride = z.strictObject({
  provider: llmRoleShape.provider.optional(),
  model: llmRoleShape.model.optional(),
  temperature: llmRoleShape.temperature.optional(),
  timeoutSeconds: llmRoleShape.timeoutSeconds.optional(),
  baseUrl: llmRoleShape.baseUrl.optional(),
  apiKeyEnv: llmRoleShape.apiKeyEnv.optional(),
  maxRetries: llmRoleShape.maxRetries.optional(),
});

export const LlmConfig = z.strictObject({
  default: LlmRoleConfig.prefault({}),
  planner: LlmRoleOverride.optional(),
  judge: LlmRoleOverride.optional(),
  worker: LlmRoleOverride.optional(),
  replanner: LlmRoleOverride.optional(),
  scenario: z
    .string()
    .min(1)
    .optional()
    .describe('Scenario file that scripts the builtin provider (replay replans, noise, blocks).'),
  maxRepairAttempts: z
    .number()
    .int()
    .min(0)
    .max(5)
    .default(1)
    .describe('Repair retries for a reply that fails its schema.'),
});
export type LlmConfig = z.infer<typeof LlmConfig>;

/** The part of the configuration that travels with a session, so every pod decides alike. */
export const SessionConfig = z.strictObject({
  refinement: RefinementConfig.prefault({}),
  replanning: ReplanningConfig.prefault({}),
  execution: ExecutionConfig.prefault({}),
  planning: PlanningConfig.prefault({}),
  llm: LlmConfig.prefault({}),
});
export type SessionConfig = z.infer<typeof SessionConfig>;

export const RedisConfig = z.strictObject({
  url: z
    .string()
    .min(1)
    .optional()
    .describe(
      'redis:// or rediss:// URL; REDIS_URL overrides. Without it `orq run` starts its own.',
    ),
  prefix: z
    .string()
    .min(1)
    .max(64)
    .regex(/^[A-Za-z0-9_-]+$/)
    .default('orq')
    .describe('Key prefix; hash-tagged as {prefix} so it works on Redis Cluster.'),
});

export const QueuesConfig = z.strictObject({
  attempts: z.number().int().min(1).max(50).default(3).describe('Tries of a failing job.'),
  backoffMs: z.number().int().min(0).max(600_000).default(1000),
  lockDurationMs: z
    .number()
    .int()
    .min(1000)
    .max(3_600_000)
    .default(30_000)
    .describe('A job whose worker stops renewing its lock this long is redelivered.'),
  stalledIntervalMs: z.number().int().min(500).max(3_600_000).default(30_000),
  removeOnCompleteAgeSeconds: z.number().int().min(1).default(3600),
  removeOnCompleteCount: z.number().int().min(1).default(10_000),
  removeOnFailAgeSeconds: z
    .number()
    .int()
    .min(1)
    .default(7 * 86_400),
  historyMaxLength: z
    .number()
    .int()
    .min(100)
    .default(100_000)
    .describe('Approximate cap of one session history stream.'),
});

export const ConcurrencyConfig = z.strictObject({
  planner: z.number().int().min(1).max(1000).default(2),
  judge: z.number().int().min(1).max(1000).default(4),
  worker: z.number().int().min(1).max(1000).default(4),
  replanner: z.number().int().min(1).max(1000).default(2),
  coordinator: z.number().int().min(1).max(1000).default(8),
});

/** The whole configuration file. */
export const OrqConfig = z.strictObject({
  $schema: z.string().optional(),
  ...SessionConfig.shape,
  redis: RedisConfig.prefault({}),
  queues: QueuesConfig.prefault({}),
  concurrency: ConcurrencyConfig.prefault({}),
  logLevel: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
});
export type OrqConfig = z.infer<typeof OrqConfig>;
export type OrqConfigInput = z.input<typeof OrqConfig>;
