import { z } from 'zod';
import { OVERRIDE_PATTERN, SAFE_SESSION_OVERRIDES } from './override-policy.js';

/**
 * Every key and default of the seeds, validated. Objects are strict so a typo in a key is an
 * error that names it; `.prefault({})` lets an omitted section take its inner defaults.
 */

/**
 * Settings that name a file or directory. A relative one is read where the process that uses it
 * runs: the CLI makes a session's absolute before it submits it (session-paths.ts), since the
 * pods' working directory is not the user's.
 */
export const pathSettings = z.registry<{ names: 'file' | 'directory' }>();

/** Marks `schema` as a setting that names a file or a directory (pathSettings). */
function pathSetting<T extends z.core.$ZodType>(names: 'file' | 'directory', schema: T): T {
  pathSettings.add(schema, { names });
  return schema;
}

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
      'When a replan breaks the structure and the previous plan was acceptable, run the previous plan. Otherwise the previous plan goes back to the Planner while refinement attempts remain.',
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
  targetScore: z
    .number()
    .min(0)
    .max(100)
    .optional()
    .describe(
      "Accept an acceptable plan scoring at least this at once, suggestions or not; replan one below it for the judge's suggestions while maxSuggestionReplans allows (the seeds' origin uses 85). Unset: the seeds' rule (refineSuggestionsOnSuccess) alone.",
    ),
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
      "Treat a preservation rate below minPreservationRate as a structure break instead of a warning: a plan replan is not run, a task replan's subtasks are refused and the task BLOCKED.",
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

const ServerName = z
  .string()
  .regex(/^[A-Za-z0-9_-]{1,32}$/, 'letters, digits, _ and - only (at most 32)')
  .describe("Prefix of the server's tools as the agent sees them: <name>__<tool>.");

/** An MCP server the agent executor connects to (issue 5), through the official MCP SDK. */
export const McpServerConfig = z.discriminatedUnion('transport', [
  z.strictObject({
    name: ServerName,
    transport: z.literal('stdio'),
    command: z.string().min(1).describe('Program that speaks MCP on its stdin/stdout.'),
    args: z.array(z.string()).default([]),
    env: z
      .record(z.string(), z.string())
      .default({})
      .describe(
        'Added to a minimal environment (PATH, HOME, ...). Kept in Redis with the session: name secrets with envFromPod instead.',
      ),
    envFromPod: z
      .record(z.string().min(1), z.string().min(1))
      .optional()
      .describe(
        "Variables of the server's environment read from the pod's when it starts, e.g. {GITHUB_TOKEN: ORQ_MCP_GITHUB_TOKEN}: the secret stays in the pod, only its name travels with the session.",
      ),
  }),
  z.strictObject({
    name: ServerName,
    transport: z.literal('http'),
    url: z.url().describe('Streamable HTTP endpoint of the server.'),
    headers: z
      .record(z.string(), z.string())
      .default({})
      .describe('Kept in Redis with the session: name secrets with headersFromEnv instead.'),
    headersFromEnv: z
      .record(z.string().min(1), z.string().min(1))
      .optional()
      .describe(
        "Headers read from the pod's environment when it connects, e.g. {Authorization: ORQ_MCP_AUTH}: the secret stays in the pod, only its name travels with the session.",
      ),
  }),
]);
export type McpServerConfig = z.infer<typeof McpServerConfig>;

/** A check run after the coding agent: block fails the task, warn only logs, retry reruns once. */
export const CommandCheckConfig = z.strictObject({
  name: z.string().min(1),
  command: z.array(z.string()).min(1).describe('argv, run without a shell in the worktree.'),
  mode: z.enum(['block', 'warn', 'retry']).default('block'),
  timeoutSeconds: z.number().int().min(1).max(86_400).optional(),
});
export type CommandCheckConfig = z.infer<typeof CommandCheckConfig>;

/** The command executor: a coding-agent CLI in a git worktree on its own branch per task. */
export const CommandExecutorConfig = z.strictObject({
  template: z
    .array(z.string())
    .min(1)
    .describe(
      'argv of the agent CLI, no shell; {{prompt}}, {{taskId}}, {{title}}, {{sessionId}}, {{branch}}, {{workdir}}, {{attempt}} are replaced.',
    ),
  repository: pathSetting(
    'directory',
    z.string().min(1).describe('Path of the git repository the tasks work on.'),
  ),
  baseBranch: z
    .string()
    .min(1)
    .optional()
    .describe('Branch new task branches start from; HEAD when unset.'),
  timeoutSeconds: z.number().int().min(1).max(86_400).default(1800),
  maxOutputBytes: z
    .number()
    .int()
    .min(1024)
    .max(104_857_600)
    .default(1_048_576)
    .describe('Cap on the captured output of the agent and of each check (the tail is kept).'),
  checks: z.array(CommandCheckConfig).default([]),
  providerKeys: z
    .array(z.string().min(1))
    .default([])
    .describe(
      'Provider key variables the agent CLI gets, e.g. [ANTHROPIC_API_KEY]: a pod takes its provider keys out of its environment, so the CLI inherits none it is not given here. Each is read as orq reads keys: the variable, or the file its _FILE variable names.',
    ),
});
export type CommandExecutorConfig = z.infer<typeof CommandExecutorConfig>;

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
    .describe('Executor a worker uses when the task names none: llm, agent or command.'),
  taskExecutors: z
    .array(z.string().min(1))
    .default([])
    .describe(
      "Executors a planned task may name for itself (its executor field) instead of defaultExecutor. A plan's other choices are taken out, recorded in the history, and those tasks run on defaultExecutor. Empty: tasks cannot choose.",
    ),
  maxAgentActions: z
    .number()
    .int()
    .min(1)
    .max(1000)
    .default(30)
    .describe('Tool calls one agent run may make before it stops (the agent executor).'),
  askHuman: z
    .boolean()
    .default(true)
    .describe(
      "Offer the agent executor's model the tool ask_human: it asks a person and the run waits for the answer, holding nothing (docs/people-in-the-loop.md). false where nobody answers.",
    ),
  workspaceRoot: pathSetting(
    'directory',
    z
      .string()
      .min(1)
      .default('.orq/workspaces')
      .describe(
        'Directory holding one workspace per session and task (agent and command executors).',
      ),
  ),
  commandAllowlist: z
    .array(z.string().min(1))
    .optional()
    .describe(
      "Programs (argv[0]) the agent's run_command tool may start; any when unset. An allowed program still runs as the pod's user: see execution.toolSandbox.",
    ),
  toolSandbox: z
    .enum(['auto', 'required', 'off'])
    .default('auto')
    .describe(
      "run_command's programs in a PID namespace of their own (bwrap, else unshare), where they cannot see the pod's processes, so not its environment (API keys) or memory, and read its key files (<VAR>_FILE) as empty. auto: where one works, else without (the task's log says so); required: a command is refused where none works; off: never.",
    ),
  toolTimeoutSeconds: z
    .number()
    .int()
    .min(1)
    .max(3600)
    .default(60)
    .describe('Time limit of one agent tool call (run_command, MCP tools).'),
  toolMaxOutputBytes: z
    .number()
    .int()
    .min(1024)
    .max(10_485_760)
    .default(65_536)
    .describe('Cap on the output of one agent tool call; the rest is cut off.'),
  mcpServers: z
    .array(McpServerConfig)
    .default([])
    .describe('MCP servers whose tools the agent executor may call.'),
  command: CommandExecutorConfig.optional().describe(
    'The command executor: a coding-agent CLI run in a git worktree per task.',
  ),
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
      directory: pathSetting('directory', z.string().min(1).default('planning_history')),
    })
    .prefault({}),
});
export type PlanningConfig = z.infer<typeof PlanningConfig>;

export const LlmProviderName = z.enum(['builtin', 'openai', 'anthropic']);
export type LlmProviderName = z.infer<typeof LlmProviderName>;

/**
 * A provider's quota (issue 33), shared by every pod and role whose provider kind, base URL and
 * API key are the same (src/workers/llm/quota.ts): enforced in Redis before each call, and
 * paused for all of them on a 429 until the time the provider gives.
 */
export const RateLimitConfig = z.strictObject({
  requestsPerMinute: z
    .number()
    .positive()
    .optional()
    .describe('Requests per minute the provider allows for this key; no limit when unset.'),
  tokensPerMinute: z
    .number()
    .positive()
    .optional()
    .describe(
      'Input + output tokens per minute; each call reserves an estimate (prompt characters / 4 + maxOutputTokens, or when unset 16384 for Anthropic, 1024 for OpenAI) and is settled with the usage the provider reports.',
    ),
  maxConcurrent: z
    .number()
    .int()
    .min(1)
    .optional()
    .describe(
      'Calls in flight at once over all pods; a slot of a pod that died is freed when its lease (the call time limit + 5 s) lapses.',
    ),
  burstSeconds: z
    .number()
    .min(1)
    .max(60)
    .default(10)
    .describe(
      "How many seconds' worth of the per-minute quota may be spent at once after a quiet spell (the bucket's size). Lower it for a provider that enforces its quota over shorter spans.",
    ),
});
export type RateLimitConfig = z.infer<typeof RateLimitConfig>;

const llmRoleShape = {
  provider: LlmProviderName.describe('builtin is deterministic and offline (tests, demo).'),
  model: z.string().min(1),
  temperature: z
    .number()
    .min(0)
    .max(2)
    .describe(
      "Sampling temperature for OpenAI-compatible servers, sent only when set (the server's default otherwise; OpenAI's reasoning models refuse any other). Not sent to Anthropic.",
    ),
  timeoutSeconds: z
    .number()
    .min(1)
    .max(3600)
    .describe(
      'Time limit of one model call, retries included. The replanner uses replanning.timeoutSeconds (seed 001), or llm.replanner.timeoutSeconds when that is lower.',
    ),
  baseUrl: z
    .url()
    .describe(
      "The provider's server or a gateway: …/v1 for OpenAI-compatible servers (Ollama, vLLM, LM Studio), no /v1 for Anthropic. A role naming another provider than llm.default does not inherit it, nor apiKeyEnv, rateLimit or model.",
    ),
  apiKeyEnv: z
    .string()
    .min(1)
    .describe(
      "Environment variable holding the API key (default OPENAI_API_KEY or ANTHROPIC_API_KEY; none needed with a baseUrl such as Ollama). Or <variable>_FILE names a file holding it (a mounted secret), which keeps the key out of the pod's environment. A pod takes the key out of its environment when it starts, so no program it runs inherits it.",
    ),
  maxRetries: z
    .number()
    .int()
    .min(0)
    .max(10)
    .describe(
      'Retries with backoff on rate limits (429), server errors (5xx) and timeouts. With a rateLimit, a 429 is not retried by the SDK: it pauses the shared limit until the time the provider gives.',
    ),
  maxOutputTokens: z
    .number()
    .int()
    .min(1)
    .max(1_000_000)
    .describe(
      'Cap on the tokens of one reply (Anthropic max_tokens, default 16384; OpenAI max_completion_tokens, sent only when set). Raise it for long worker output.',
    ),
  structuredOutput: z
    .enum(['native', 'json', 'prompt'])
    .describe(
      'native: the provider enforces the JSON Schema (OpenAI json_schema, Anthropic output_config.format); json: JSON mode only; prompt: the schema is in the prompt only, for servers without either.',
    ),
  toolCalling: z
    .enum(['native', 'structured'])
    .describe(
      "How the agent executor's model calls a tool. native: the provider's function calling, with each tool's input schema (OpenAI tools, Anthropic tool_use); structured: a structured reply naming the tool and its arguments, for servers or models without function calling.",
    ),
  rateLimit: RateLimitConfig.describe(
    "The provider's quota, shared by every role and pod with the same provider, baseUrl and API key; {} alone shares a 429's pause.",
  ),
};

export const LlmRoleConfig = z.strictObject({
  provider: llmRoleShape.provider.default('builtin'),
  model: llmRoleShape.model.default('builtin'),
  temperature: llmRoleShape.temperature.optional(),
  timeoutSeconds: llmRoleShape.timeoutSeconds.default(120),
  baseUrl: llmRoleShape.baseUrl.optional(),
  apiKeyEnv: llmRoleShape.apiKeyEnv.optional(),
  maxRetries: llmRoleShape.maxRetries.default(2),
  maxOutputTokens: llmRoleShape.maxOutputTokens.optional(),
  structuredOutput: llmRoleShape.structuredOutput.default('native'),
  toolCalling: llmRoleShape.toolCalling.default('native'),
  rateLimit: llmRoleShape.rateLimit.optional(),
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
  maxOutputTokens: llmRoleShape.maxOutputTokens.optional(),
  structuredOutput: llmRoleShape.structuredOutput.optional(),
  toolCalling: llmRoleShape.toolCalling.optional(),
  rateLimit: llmRoleShape.rateLimit.optional(),
});

/** Record every model request/response pair, or answer from such a recording (record-replay.ts). */
export const LlmRecordConfig = z.strictObject({
  mode: z
    .enum(['off', 'record', 'replay'])
    .default('off')
    .describe(
      'record: call the model and save each request/response pair; replay: answer from the saved pairs only (no network, no key).',
    ),
  path: pathSetting(
    'directory',
    z
      .string()
      .min(1)
      .default('.orq/llm-recordings')
      .describe('Directory of the recording (one JSON file per request hash).'),
  ),
});
export type LlmRecordConfig = z.infer<typeof LlmRecordConfig>;

/**
 * Adaptive judging (issue 38): ask the plan judge again only while its mean score is within a
 * margin of a line where the refinement decision changes (rules/adaptive-judging.ts).
 */
export const AdaptiveJudgingConfig = z.strictObject({
  maxCalls: z
    .number()
    .int()
    .min(1)
    .max(15)
    .default(8)
    .describe('Hard cap on plan judge calls for one plan, the first included.'),
  acceptanceScore: z
    .number()
    .min(0)
    .max(100)
    .default(70)
    .describe(
      "The score that marks an acceptable plan, as the judge's prompt says (70): the line the margin is tested against.",
    ),
  priorSigma: z
    .number()
    .min(0.5)
    .max(50)
    .default(7.5)
    .describe(
      "The judge's noise in score points (one standard deviation) assumed before its samples show their spread; with learnNoise, only until its repeated scores on earlier plans do.",
    ),
  z: z
    .number()
    .min(0)
    .max(5)
    .default(1.25)
    .describe(
      'Margin at the first call, in standard deviations; it shrinks as calls^-marginExponent. Larger: fewer wrong decisions, more calls.',
    ),
  marginExponent: z
    .number()
    .min(0.5)
    .max(1.5)
    .default(1)
    .describe(
      "How fast the margin shrinks: z·σ/calls^marginExponent. 0.5 is a confidence interval (keeps asking about scores right on a line), 1 Wald's sequential test (stops earlier).",
    ),
  learnNoise: z
    .boolean()
    .default(true)
    .describe(
      "Learn the judge's noise from the spread of its repeated scores on earlier plans (kept in Redis per judge provider and model, shared by every pod), starting from priorSigma; false: priorSigma and the plan's own scores only. Off while llm.record records or replays, so a replay makes the recorded calls.",
    ),
  learnedWeight: z
    .number()
    .int()
    .min(1)
    .max(1000)
    .default(50)
    .describe(
      "At most this many earlier repeated calls' worth of spread weigh in the learned noise, against priorSigma's 2: priorSigma keeps a say, and a plan's own scores still count.",
    ),
  stagnationLines: z
    .boolean()
    .default(false)
    .describe(
      'Also ask again near the stagnation and noise lines drawn from the previous score (they choose between replan and reject of an unacceptable plan).',
    ),
});
export type AdaptiveJudgingConfig = z.infer<typeof AdaptiveJudgingConfig>;

/** Judge noise (issue 4): sample the plan judge k times and decide on the median score. */
export const JudgeSamplesConfig = z.strictObject({
  mode: z
    .enum(['fixed', 'adaptive'])
    .default('fixed')
    .describe(
      "fixed: k calls per plan (k = 1 is the seeds' rule); adaptive: one call, then more only where they can change the decision (see adaptive).",
    ),
  k: z
    .number()
    .int()
    .min(1)
    .max(15)
    .default(1)
    .describe(
      'Plan judge calls per plan in fixed mode; 1 turns sampling off. An odd k avoids vote ties.',
    ),
  aggregate: z
    .enum(['median'])
    .default('median')
    .describe(
      'median: the median score decides, isAcceptable by majority, the spread goes to history. Adaptive mode uses the rounded mean.',
    ),
  adaptive: AdaptiveJudgingConfig.prefault({}),
  logprobScores: z
    .boolean()
    .default(false)
    .describe(
      "The plan score is the expected value over the score token's log-probabilities (OpenAI-compatible servers that return logprobs: OpenAI, vLLM), in one call; the stated score where none are returned.",
    ),
  confirmTaskVerdicts: z
    .array(z.enum(['replan', 'blocked']))
    .default([])
    .describe(
      'Task verdicts that stand only when a second task judge call agrees; a disagreement is settled by a third call (majority), and when all three differ by the first verdict not listed here.',
    ),
});
export type JudgeSamplesConfig = z.infer<typeof JudgeSamplesConfig>;

export const LlmConfig = z.strictObject({
  default: LlmRoleConfig.prefault({}),
  planner: LlmRoleOverride.optional(),
  judge: LlmRoleOverride.optional(),
  worker: LlmRoleOverride.optional(),
  replanner: LlmRoleOverride.optional(),
  scenario: pathSetting(
    'file',
    z
      .string()
      .min(1)
      .optional()
      .describe('Scenario file that scripts the builtin provider (replay replans, noise, blocks).'),
  ),
  maxRepairAttempts: z
    .number()
    .int()
    .min(0)
    .max(5)
    .default(1)
    .describe('Repair retries for a reply that fails its schema.'),
  record: LlmRecordConfig.prefault({}),
  judgeSamples: JudgeSamplesConfig.prefault({}),
});
export type LlmConfig = z.infer<typeof LlmConfig>;

/** USD per million tokens of one model, for the cost estimate and the maxUsd budget. */
export const ModelPrice = z.strictObject({
  inputPerMTok: z.number().min(0).describe('USD per million input tokens.'),
  outputPerMTok: z.number().min(0).describe('USD per million output tokens.'),
});
export type ModelPrice = z.infer<typeof ModelPrice>;

/**
 * Cost control (issue 4): every call's tokens are counted per session, role and task; with a
 * limit set, each call first reserves what it can use atomically, waits while calls in flight
 * hold the room it needs, and the session stops in BUDGET_EXHAUSTED when what is used leaves no
 * room for the next call.
 */
export const BudgetConfig = z.strictObject({
  maxTokens: z
    .number()
    .int()
    .min(1)
    .optional()
    .describe('Input + output tokens the session may use over all roles; no limit when unset.'),
  maxUsd: z
    .number()
    .positive()
    .optional()
    .describe('USD the session may spend, priced with `prices`; no limit when unset.'),
  reserveTokensPerCall: z
    .number()
    .int()
    .min(1)
    .max(10_000_000)
    .default(4000)
    .describe(
      "Tokens a model call reserves for its output when it sends no output limit (OpenAI-compatible without maxOutputTokens), and for the whole call where its prompt is not known ahead (the builtin provider). Other calls reserve their prompt's tokens plus their output limit.",
    ),
  prices: z
    .record(z.string().min(1), ModelPrice)
    .default({})
    .describe('Price per model name (llm.*.model), e.g. {"gpt-4o-mini": {...}}.'),
  maxTasks: z
    .number()
    .int()
    .min(1)
    .max(100_000)
    .default(10_000)
    .describe(
      'Tasks a session may hold, replaced ones included: a plan with more goes back to the Planner as one that cannot run, and a replan whose subtasks would pass it blocks its task. Accepting a plan is one Redis script, which holds Redis about 25 ms per 1,000 tasks on a 2-core machine.',
    ),
});
export type BudgetConfig = z.infer<typeof BudgetConfig>;

/**
 * What `orq result`, client.result() and GET /sessions/:id/result give as the session's result
 * (rules/session-result.ts). A session setting, so every reader of one session agrees.
 */
export const ResultConfig = z.strictObject({
  tasks: z
    .enum(['final', 'done'])
    .default('final')
    .describe(
      'Which tasks make up the result: final (those no other task depends on, a replanned task counted as its subtasks; a final task skipped or cancelled counted as the done tasks it followed) or done (every DONE task, in plan order).',
    ),
  maxTextLength: z
    .number()
    .int()
    .min(100)
    .max(100_000_000)
    .optional()
    .describe(
      "Characters of the result's text form (what `orq result` and `orq run` print); a longer one is cut, with a note. The outputs in JSON are never cut. No limit when unset.",
    ),
});
export type ResultConfig = z.infer<typeof ResultConfig>;

/** A command that settles conflicts in files it regenerates (a lockfile, generated code). */
export const IntegrationResolverConfig = z.strictObject({
  files: z
    .array(z.string().min(1))
    .min(1)
    .describe(
      'Paths or globs (* within a folder, ** across folders) of the files this command regenerates; a pattern without / matches the file name in any folder.',
    ),
  command: z
    .array(z.string())
    .min(1)
    .describe(
      'argv, run without a shell at the root of the merged tree after the conflicting files were set to the result so far, e.g. [npm, install, --package-lock-only].',
    ),
  timeoutSeconds: z.number().int().min(1).max(86_400).default(600),
});
export type IntegrationResolverConfig = z.infer<typeof IntegrationResolverConfig>;

/** A pull request (GitHub) or merge request (GitLab) opened for the result branch. */
export const PullRequestConfig = z.strictObject({
  provider: z.enum(['github', 'gitlab']),
  project: z
    .string()
    .min(1)
    .describe('owner/name on GitHub; the project id or its path (group/name) on GitLab.'),
  apiUrl: z
    .url()
    .optional()
    .describe(
      'The REST API root: https://api.github.com or https://gitlab.com/api/v4 when unset (set it for GitHub Enterprise or a GitLab of your own).',
    ),
  remote: z
    .string()
    .min(1)
    .default('origin')
    .describe('The git remote of the repository the result branch is pushed to.'),
  targetBranch: z
    .string()
    .min(1)
    .optional()
    .describe('The branch the request merges into: execution.command.baseBranch, else main.'),
  tokenEnv: z
    .string()
    .regex(/^[A-Za-z_][A-Za-z0-9_]*$/)
    .optional()
    .describe(
      "The pod's variable holding the API token (or the file its _FILE variable names): GITHUB_TOKEN or GITLAB_TOKEN when unset.",
    ),
});
export type PullRequestConfig = z.infer<typeof PullRequestConfig>;

/**
 * The integration step (docs/executors.md#integration): once the tasks of a session with git
 * artifacts are finished, their branches are merged into one result branch and checked there.
 */
export const IntegrationConfig = z.strictObject({
  enabled: z
    .boolean()
    .default(true)
    .describe(
      'Merge the task branches of a session that ran tasks through the command executor into orq/<session>/result before it completes.',
    ),
  strategy: z
    .enum(['merge', 'squash', 'fast-forward'])
    .default('merge')
    .describe(
      'How each task branch joins the result: merge (a merge commit per task), squash (one commit per task) or fast-forward (where the result has not moved on, else a merge commit).',
    ),
  resolvers: z
    .array(IntegrationResolverConfig)
    .default([])
    .describe(
      'Commands that settle conflicts in the files they regenerate (lockfiles, generated code). A conflict in any other file stops the integration.',
    ),
  maxResolutionRounds: z
    .number()
    .int()
    .min(0)
    .max(10)
    .default(2)
    .describe(
      'Times a conflict no resolver covers becomes a conflict-resolution task (the hunks and both tasks with it) before the integration runs again; past it, the session fails with the conflict. 0: fail at once.',
    ),
  maxRounds: z
    .number()
    .int()
    .min(0)
    .max(10)
    .default(2)
    .describe(
      'Times the final judge may send the session back for what it finds missing on the result branch (a failing check counts): its findings become tasks through the Replanner, held to the required terms, and the integration runs again on the moved branch. Past it, the session fails with what is missing. 0: fail at once.',
    ),
  pullRequest: PullRequestConfig.optional().describe(
    "Once the final judge finds the result branch done: push it and open a pull request (GitHub) or merge request (GitLab) for it, with the session's summary as its body; once, however often the integration runs. None for a branch the session fails on.",
  ),
});
export type IntegrationConfig = z.infer<typeof IntegrationConfig>;

/** How a session's ready tasks are released to the workers (docs/fairness.md). */
export const SchedulingConfig = z.strictObject({
  maxTasksInFlight: z
    .number()
    .int()
    .min(0)
    .max(100_000)
    .default(0)
    .describe(
      'Tasks of one session dispatched to workers at once; its other ready tasks wait in Redis, longest critical path first, and go as its tasks finish. 0: no limit (every ready task is enqueued at once, longest critical path first; fair release still orders sessions in the queues).',
    ),
});
export type SchedulingConfig = z.infer<typeof SchedulingConfig>;

/** What the task judge is asked besides its verdicts (issue 50). */
export const JudgingConfig = z.strictObject({
  checkAlreadySatisfied: z
    .boolean()
    .default(false)
    .describe(
      "Before a task's first execution, ask the judge whether the task is met already (by earlier tasks' outputs or the repository); a task it finds satisfied is SKIPPED, and its dependents go on. One judge call per task.",
    ),
});
export type JudgingConfig = z.infer<typeof JudgingConfig>;

/** A regular expression as a config string: refused at load time when it does not compile. */
const Pattern = z
  .string()
  .min(1)
  .max(1000)
  .refine(
    (source) => {
      try {
        new RegExp(source);
        return true;
      } catch {
        return false;
      }
    },
    { message: 'not a valid regular expression (JavaScript syntax)' },
  );

/**
 * One rule of approval.steps (shared/rules/step-approval.ts): which steps of a running task wait
 * for a person first. A step waits when any rule matches it.
 */
export const StepRule = z.union(
  [
    z
      .strictObject({
        tool: z
          .string()
          .min(1)
          .describe("An agent tool's name (run_command, write_file, an MCP tool), or * for any."),
        match: Pattern.optional().describe(
          "A regular expression the call's input must match: run_command's argv as one line (git push origin main), a file tool's path, else the input as JSON. Unset: every call.",
        ),
      })
      .describe('An agent tool call.'),
    z
      .strictObject({
        command: Pattern.describe(
          "A regular expression a command line must match: the command executor's run, or an agent's run_command.",
        ),
      })
      .describe('A program about to start.'),
    z
      .strictObject({
        writeOutsideWorktree: z
          .literal(true)
          .describe(
            "An agent tool that writes (its name says write, edit, create, move, delete…) given a path outside the task's workspace (MCP servers' file tools; orq's own refuse such paths).",
          ),
      })
      .describe('A write outside the workspace.'),
  ],
  {
    error:
      'a step rule is one of { tool: NAME, match?: REGEX }, { command: REGEX } or { writeOutsideWorktree: true }',
  },
);
export type StepRule = z.infer<typeof StepRule>;

/** How long a wait for a person may last before it ends on its own: a second to 30 days. */
const WaitSeconds = z
  .number()
  .int()
  .min(1)
  .max(30 * 24 * 3600);

/** What a timed-out approval does. */
const WaitTimeoutAction = z.enum(['approve', 'reject']);

/** Where a person decides before the session goes on (issue 48, docs/people-in-the-loop.md). */
export const ApprovalConfig = z.strictObject({
  steps: z
    .array(StepRule)
    .max(100)
    .default([])
    .describe(
      'Steps of a running task that wait for a person first (approve or reject, with a reason): agent tool calls and command runs. The work job ends while it waits, so it holds no worker, lock or quota; approved, the execution resumes from its recorded steps.',
    ),
  plan: z
    .enum(['off', 'required'])
    .default('off')
    .describe(
      'required: once the refinement loop accepts a plan, the session waits in AWAITING_APPROVAL until a person approves, edits or rejects it (orq approve / edit / reject, the HTTP API, the session view). Waiting holds no worker, lock or quota.',
    ),
  timeoutSeconds: WaitSeconds.optional().describe(
    'End a plan approval nobody answered after this many seconds, as onTimeout says. Unset: wait for ever.',
  ),
  onTimeout: WaitTimeoutAction.default('reject').describe(
    'What a timed-out plan approval does: approve runs the plan; reject fails the session (APPROVAL_TIMED_OUT).',
  ),
  stepTimeoutSeconds: WaitSeconds.optional().describe(
    "End a running execution's wait nobody answered after this many seconds: a step approval of approval.steps, as onStepTimeout says; an agent's ask_human question, whose agent goes on without an answer. Unset: wait for ever.",
  ),
  onStepTimeout: WaitTimeoutAction.default('reject').describe(
    "What a timed-out step approval does: approve runs the step; reject gives the executor the rejection, as a person's (the agent hears it as the tool's result; the command executor's run fails).",
  ),
});
export type ApprovalConfig = z.infer<typeof ApprovalConfig>;

/** The part of the configuration that travels with a session, so every pod decides alike. */
export const SessionConfig = z.strictObject({
  refinement: RefinementConfig.prefault({}),
  judging: JudgingConfig.prefault({}),
  replanning: ReplanningConfig.prefault({}),
  execution: ExecutionConfig.prefault({}),
  planning: PlanningConfig.prefault({}),
  llm: LlmConfig.prefault({}),
  budget: BudgetConfig.prefault({}),
  result: ResultConfig.prefault({}),
  integration: IntegrationConfig.prefault({}),
  scheduling: SchedulingConfig.prefault({}),
  approval: ApprovalConfig.prefault({}),
});
export type SessionConfig = z.infer<typeof SessionConfig>;

/**
 * What ioredis can connect to: a redis:// or rediss:// URL that parses (an unparsable one threw
 * `Invalid URL` from inside ioredis; another scheme was read as a host named after it), a port,
 * a socket path, or a bare `host:port` that parses once ioredis puts `redis://` before it (one
 * that does not, `not a url`, threw the same `Invalid URL` from inside ioredis).
 */
function isRedisAddress(value: string): boolean {
  if (!value.includes('://')) {
    if (/^\d+$/.test(value) || (value.startsWith('/') && !value.startsWith('//'))) return true;
    return URL.canParse(value.startsWith('//') ? `redis:${value}` : `redis://${value}`);
  }
  try {
    const url = new URL(value);
    return (
      (url.protocol === 'redis:' || url.protocol === 'rediss:') &&
      url.hostname !== '' &&
      url.port !== '0' &&
      // The path names the database; ioredis sent SELECT NaN for another, and crashed on it.
      /^(\/\d*)?$/.test(url.pathname)
    );
  } catch {
    return false;
  }
}

export const RedisConfig = z.strictObject({
  url: z
    .string()
    .min(1)
    .refine(isRedisAddress, {
      message:
        'expected a redis:// or rediss:// URL with a port from 1 to 65535 and, if any, a database number as its path, e.g. redis://127.0.0.1:6379 or redis://127.0.0.1:6379/2',
    })
    .optional()
    .describe(
      'redis:// or rediss:// URL, its path the database (e.g. /2; one the server does not have is refused); REDIS_URL overrides. Without it `orq run` starts its own.',
    ),
  prefix: z
    .string()
    .min(1)
    .max(64)
    .regex(/^[A-Za-z0-9_-]+$/)
    .default('orq')
    .describe(
      "Key prefix. BullMQ's keys are hash-tagged {prefix} ({prefix:queue} on a Redis Cluster), each session's {sessionId}, so every script's keys share a Redis Cluster slot.",
    ),
  cluster: z
    .boolean()
    .default(false)
    .describe(
      'Connect to a Redis Cluster: redis.url names one of its nodes, the others are discovered (ORQ__redis__cluster=true).',
    ),
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
  taskJobNames: z
    .enum(['descriptive', 'plain'])
    .default('descriptive')
    .describe(
      'Names of work, task-judge and replan jobs: descriptive (`execute t4 "Write parser" #2`, shown by Bull Board) or plain (`execute`). Set plain while a rolling upgrade still runs pods from before task cards (issue 40): those refuse descriptive names.',
    ),
  historyMaxLength: z
    .number()
    .int()
    .min(100)
    .default(100_000)
    .describe('Approximate cap of one session history stream.'),
});

/** How long finished sessions are kept (coordinator pods apply it; `orq prune` does it by hand). */
export const RetentionConfig = z.strictObject({
  deleteFinishedAfterSeconds: z
    .number()
    .int()
    .min(1)
    .optional()
    .describe(
      'Coordinator pods delete sessions that finished (COMPLETED, FAILED, CANCELLED, BUDGET_EXHAUSTED) and have been idle this long. Unset: sessions are kept until `orq delete` or `orq prune`.',
    ),
  sweepIntervalSeconds: z
    .number()
    .int()
    .min(1)
    .max(86_400)
    .default(600)
    .describe('How often a coordinator pod looks for sessions to delete.'),
});

export const ConcurrencyConfig = z.strictObject({
  planner: z.number().int().min(1).max(1000).default(2),
  judge: z.number().int().min(1).max(1000).default(4),
  worker: z.number().int().min(1).max(1000).default(4),
  replanner: z.number().int().min(1).max(1000).default(2),
  coordinator: z.number().int().min(1).max(1000).default(8),
});

/** `orq dashboard`: the HTTP API and Bull Board. The token comes from ORQ_API_TOKEN only. */
export const HttpConfig = z.strictObject({
  host: z
    .string()
    .min(1)
    .default('127.0.0.1')
    .describe('Address to listen on; a non-loopback address requires ORQ_API_TOKEN.'),
  port: z.number().int().min(0).max(65_535).default(3000).describe('Port (0 picks a free one).'),
  readOnlyBoard: z
    .boolean()
    .default(false)
    .describe(
      'Bull Board and the session view (/ui) in read-only mode: no retry or clean in the board even for the operator (ORQ_OPERATOR_TOKEN), no resume or cancel in the view. The board never adds, edits, promotes or removes jobs, nor pauses, empties or obliterates queues; without ORQ_OPERATOR_TOKEN it is read-only for everyone.',
    ),
  trustProxy: z
    .union([z.boolean(), z.number().int().min(1).max(100), z.string().min(1)])
    .default(false)
    .describe(
      'Trust a TLS-terminating proxy\'s X-Forwarded-Proto, -Host and -For: true, the number of proxies, or their addresses ("10.0.0.0/8"). The browser pages\' cookie is then Secure behind it. Leave false where clients reach the server directly: they could forge the headers.',
    ),
  maxStreamsPerCaller: z
    .number()
    .int()
    .min(1)
    .max(10_000)
    .default(32)
    .describe(
      "Event streams (GET /sessions/:id/events, and the session view's) one caller may hold open at once on this server, each holding a Redis connection: the API token, the operator token and each tenant key count apart. One more is answered 429.",
    ),
  mayAnswer: z
    .array(z.enum(['operator', 'api']))
    .default(['operator'])
    .describe(
      "Credentials that may answer a session waiting for a person (approve, edit or reject its plan, answer a question) over the HTTP API and in the session view: the operator token (ORQ_OPERATOR_TOKEN), and the API token (ORQ_API_TOKEN) if listed. A tenant's key may when created with `orq keys create --may-answer`. A server with no token (loopback only) lets anyone; the CLI and the library always may.",
    ),
  sessionOverrides: z
    .array(
      z
        .string()
        .regex(OVERRIDE_PATTERN, 'a dotted config path, * for any one key (e.g. llm.*.model)')
        .refine(
          (pattern) => {
            const first = pattern.split('.')[0] as string;
            return first === '*' || Object.hasOwn(SessionConfig.shape, first);
          },
          {
            message: `a session setting: starts with * or ${Object.keys(SessionConfig.shape).join(', ')}`,
          },
        ),
    )
    .default([...SAFE_SESSION_OVERRIDES])
    .describe(
      'Session settings a submit over the HTTP API may set (dotted paths, * for any one key; ["*"] for all). The default leaves out every setting that names a program, file, endpoint or environment variable, execution.defaultExecutor and taskExecutors, budget.maxTasks and budget.prices; the CLI and the typed client are not limited.',
    ),
  models: z
    .array(
      z
        .string()
        .regex(
          /^(builtin|openai|anthropic)\/.+$/,
          'provider/model, e.g. openai/gpt-4o-mini, or provider/* for any model of it',
        ),
    )
    .default([])
    .describe(
      'Providers and models a submit over the HTTP API may choose for a role (llm.<role>.provider and model) besides those this config uses for some role, e.g. ["openai/gpt-4o-mini", "anthropic/*"]. A submit may also only lower budget.maxTokens and budget.maxUsd.',
    ),
});

/** A tenant's cap on work jobs running at once. */
const TenantCap = z
  .number()
  .int()
  .min(0)
  .max(100_000)
  .describe(
    "Work jobs of one tenant's sessions running at once across every worker pod; a job over it goes back to its queue, delayed, and tries again about a second later. 0: no cap.",
  );

/**
 * Caps per tenant (issue 33). A pod setting, not a session one: a submitter must not be able
 * to raise its own tenant's cap. Worker pods apply it, so they must agree on it.
 */
export const TenantsConfig = z.strictObject({
  maxTasksInFlight: TenantCap.default(0).describe(
    "Work jobs of one tenant's sessions running at once across every worker pod, for a tenant without an entry in tenants.caps; a job over it is handed back to its queue as delayed (no attempt spent) with `waiting for a tenant slot (<tenant>)` as its progress, and tries again about a second later. 0 (the default): no cap. Every worker pod must have the same setting.",
  ),
  caps: z
    .record(z.string(), z.strictObject({ maxTasksInFlight: TenantCap }))
    .default({})
    .describe(
      'Per tenant, a cap of its own that replaces tenants.maxTasksInFlight (0: none for that tenant), e.g. {"acme": {"maxTasksInFlight": 4}}.',
    ),
  weights: z
    .record(z.string(), z.number().positive().max(1000))
    .default({})
    .describe(
      'Per tenant, its share of the workers and of every provider quota\'s line relative to the others, e.g. {"acme": 3} gives acme 3 shares and every other tenant 1 (docs/fairness.md#weights). Coordinator and model-calling pods apply it, so they must agree on it.',
    ),
});
export type TenantsConfig = z.infer<typeof TenantsConfig>;

/** A webhook told when a session starts and stops waiting for a person (issue 48). */
export const WebhookConfig = z.strictObject({
  url: z
    .url({ protocol: /^https?$/ })
    .describe('POSTed a JSON event when a session starts or stops waiting for a person.'),
  secretEnv: z
    .string()
    .regex(/^[A-Za-z_][A-Za-z0-9_]*$/)
    .default('ORQ_WEBHOOK_SECRET')
    .describe(
      'Environment variable holding the secret the body is signed with (HMAC-SHA256, header X-Orq-Signature: sha256=<hex>), or <variable>_FILE naming a file holding it. Without one the webhook is not sent.',
    ),
  attempts: z
    .number()
    .int()
    .min(1)
    .max(50)
    .default(8)
    .describe('Tries of one delivery, with exponential backoff from backoffMs.'),
  backoffMs: z
    .number()
    .int()
    .min(10)
    .max(3_600_000)
    .default(2_000)
    .describe('Wait before the second try; doubled before each try after it.'),
  timeoutMs: z
    .number()
    .int()
    .min(100)
    .max(120_000)
    .default(10_000)
    .describe('How long one post may take before it counts as failed.'),
});
export type WebhookConfig = z.infer<typeof WebhookConfig>;

export const NotificationsConfig = z.strictObject({
  webhook: WebhookConfig.optional(),
});

/** The whole configuration file. */
export const OrqConfig = z.strictObject({
  $schema: z.string().optional(),
  ...SessionConfig.shape,
  redis: RedisConfig.prefault({}),
  queues: QueuesConfig.prefault({}),
  retention: RetentionConfig.prefault({}),
  concurrency: ConcurrencyConfig.prefault({}),
  tenants: TenantsConfig.prefault({}),
  http: HttpConfig.prefault({}),
  notifications: NotificationsConfig.prefault({}),
  logLevel: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
});
export type OrqConfig = z.infer<typeof OrqConfig>;
export type OrqConfigInput = z.input<typeof OrqConfig>;
