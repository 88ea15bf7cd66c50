/** orq's public API. */
export * from './shared/domain/index.js';
export * from './shared/config/schema.js';
export { parseConfig, loadConfig, readConfigFile, configWarnings } from './shared/config/load.js';
export { configJsonSchema } from './shared/config/json-schema.js';
export * from './shared/errors.js';

// The pure decision rules of the seeds.
export {
  makeRefinementDecision,
  isStagnated,
  isScoreChangeSignificant,
  determineScoreDirection,
  advanceRefinementCounters,
  decideBrokenReplan,
} from './shared/rules/refinement.js';
export {
  validateStructure,
  findCycles,
  findDanglingDependencies,
} from './shared/rules/structure.js';
export { extractRequiredTerms, validateTermPreservation } from './shared/rules/terms.js';
export { decideTaskOutcome, type TaskOutcome } from './shared/rules/task-outcome.js';
export { replaceTaskWithSubtasks } from './shared/rules/replace-task.js';
export { summarizeSessionProgress } from './shared/rules/session-progress.js';
export { deriveSessionResult } from './shared/rules/session-result.js';
export { checkPlanEdit, type PlanEditCheck } from './shared/rules/plan-edit.js';

// Runtime: queues, roles, client.
export * from './shared/queues.js';
export type { RoleModels } from './workers/llm/types.js';
export { createBuiltinModels } from './workers/llm/builtin.js';
export { Scenario, loadScenarioFile } from './shared/config/scenario.js';
export { startRoles, type StartRolesOptions, type RunningRoles } from './workers/registry.js';
export { startTracing, stopTracing, tracingWanted, type Tracing } from './shared/tracing/sdk.js';
export {
  configuredConnection,
  type ClusterInput,
  type ConnectionInput,
  type RedisConnection,
} from './shared/redis.js';
export {
  createClient,
  SubmitRequest,
  ResumeRequest,
  PruneRequest,
  ListRequest,
  HistoryRequest,
  ResultRequest,
  WaitOptions,
  type OrqClient,
  type CreateClientOptions,
  type SessionView,
  type SubmitOptions,
  type SubmitOutcome,
  type WatchOptions,
  type AnswerOptions,
  type AnswerOutcome,
  type PlanBreakdownInput,
} from './producers/client.js';
export { webhookSignature } from './workers/coordinator/webhook.js';

// HTTP API with Bull Board.
export {
  createHttpServer,
  startHttpServer,
  type HttpServerOptions,
  type StartHttpServerOptions,
  type RunningHttpServer,
} from './producers/http/server.js';

// Executors and real model providers, for embedding orq's roles in another process.
export {
  createExecutorRegistry,
  type ExecutorRegistry,
  type ExecutorRegistryOptions,
} from './workers/executors/registry.js';
export type { Executor, ExecutorContext } from './workers/executors/types.js';
export { createLlmModels, createChatProvider } from './workers/llm/llm-models.js';
export type { ChatProvider, ChatRequest, ChatCompletion } from './workers/llm/chat.js';
