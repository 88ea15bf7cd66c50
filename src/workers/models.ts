import { tracedChat, type ModelCallEvents } from './llm/genai.js';
import type { Logger } from '../shared/logger.js';
import type { LlmRoleConfig } from '../shared/config/schema.js';
import type { Session, SessionState } from '../shared/domain/session.js';
import { createBuiltinModels } from './llm/builtin.js';
import { resolveApiKey, type ChatProvider } from './llm/chat.js';
import {
  type ModelRole,
  MODEL_ROLES,
  roleConfig,
  sessionRoleConfigs,
} from '../shared/config/roles.js';
import { countHttpAttempts } from './llm/http-attempt-counts.js';
import type { HttpAttemptEvents } from './llm/http-attempts.js';
import { createLlmModels, type LlmRoleConfigs } from './llm/llm-models.js';
import { canonicalJson } from './llm/record-replay.js';
import { meteredChat, meteredModels } from './llm/metered.js';
import type { ProviderQuotas } from './llm/quota.js';
import { describeQuotaSession } from './llm/quota-caller.js';
import { judgeSampling, type JudgeNoiseMemory } from './llm/sampled-judge.js';
import { loadScenarioFile } from '../shared/config/scenario.js';
import type { RoleModels } from './llm/types.js';
import { UsageTally } from './llm/usage-tally.js';
import type { UsageStore } from '../shared/store/usage-store.js';
import { cancellableModels, SessionCancellation, type SessionStateReader } from './cancellation.js';

export type { ModelRole };

/**
 * Throws the missing-key error a session's first real-model call would meet, for a process that
 * runs every role itself (`orq run`): there, no other pod can have the key, so a job's retries
 * would only delay the same failure. Replay answers from a recording and needs no key.
 */
export function requireApiKeys(
  config: Session['config'],
  env: NodeJS.ProcessEnv = process.env,
): void {
  if (config.llm.record.mode === 'replay') return;
  const configs = sessionRoleConfigs(config);
  for (const role of MODEL_ROLES) resolveApiKey(role, configs[role], env);
}

export interface ModelResolverOptions {
  /** Simulated latency of the builtin provider (benchmarks). */
  latencyMs?: number;
  /** These models for every session (tests). */
  override?: RoleModels;
  /** Reads a session's state, so the real-model calls of a cancelled session are aborted. */
  sessionState?: SessionStateReader;
  /** How often a session with calls in flight is checked for cancellation. */
  cancelPollMs?: number;
  /** Where API keys are read from; process.env by default. */
  env?: NodeJS.ProcessEnv;
  /** Counts every call's tokens per session, role and task, and enforces the budget. */
  usageStore?: UsageStore;
  /** Enforces the providers' rateLimit settings across pods (issue 33). */
  quotas?: ProviderQuotas;
  /** Where a role's fall-back to prompt-mode structured output is logged. */
  logger?: Logger;
  /** Told of every HTTP request of the real-model calls, retries included (pod metrics). */
  httpAttempts?: HttpAttemptEvents;
  /** Told of every model call, with its tokens and duration (pod metrics). */
  modelCalls?: ModelCallEvents;
  /** Where adaptive judging keeps what it learns of each judge's noise (learnNoise). */
  judgeNoise?: JudgeNoiseMemory;
}

/**
 * Which judge's noise a session's plan judge learns from and adds to: its provider, model and
 * server, and for the builtin provider its scenario (a scripted judge is its own judge).
 */
export function judgeIdentity(llm: Session['config']['llm']): string {
  const cfg = roleConfig(llm, 'judge');
  const server = cfg.baseUrl !== undefined ? ` at ${cfg.baseUrl}` : '';
  const scenario =
    cfg.provider === 'builtin' && llm.scenario !== undefined ? ` scenario ${llm.scenario}` : '';
  return `${cfg.provider}/${cfg.model}${server}${scenario}`;
}

/**
 * What one execution of a task gets besides the worker's models: one signal that stops it, and
 * the metering of model calls the executor makes on its own (the agent executor's chat calls).
 */
export interface ExecutionControls {
  /** Aborts when the job's signal does, or the session finishes (cancelled, failed, budget). */
  signal: AbortSignal;
  /** The session was seen finished: whatever the execution does now is moot. */
  sessionFinished(): boolean;
  /** The provider with every request reserved and counted for the worker role and the task. */
  meterChat(provider: ChatProvider): ChatProvider;
  /**
   * The provider under its config's rateLimit, shared by every pod (issue 33), with its HTTP
   * requests counted in the pod's metrics.
   */
  limitChat(provider: ChatProvider, config: LlmRoleConfig): ChatProvider;
  /** Stops watching the session; call it when the execution ends. */
  release(): void;
}

/** Distinct LLM configurations kept ready; the oldest is dropped beyond this. */
const MAX_CACHED_CONFIGS = 64;

/**
 * Resolves the models a role uses for a session: the session's own llm config decides the
 * provider (so one cluster can serve sessions with different scenarios or providers). A role
 * whose provider is builtin gets the deterministic builtin models; any other gets real models
 * over the SDK providers, one set per distinct configuration.
 */
export class ModelResolver {
  private readonly builtinByScenario = new Map<string, Promise<RoleModels>>();
  private readonly llmByConfig = new Map<string, RoleModels>();
  /**
   * Each session's wrapped models per role, kept with the config object they were built from:
   * a job builds no wrappers, and a raised budget (a new record, so a new config) builds anew.
   */
  private readonly bySessionConfig = new WeakMap<
    Session['config'],
    { sessionId: string; roles: Map<ModelRole, RoleModels> }
  >();
  private readonly cancellation: SessionCancellation | undefined;

  constructor(private readonly options: ModelResolverOptions = {}) {
    this.cancellation = options.sessionState
      ? new SessionCancellation(options.sessionState, options.cancelPollMs)
      : undefined;
  }

  async forSession(session: Session, role: ModelRole): Promise<RoleModels> {
    // The job's calls wait at a provider's line as its session's tenant and priority.
    describeQuotaSession(session);
    let built = this.bySessionConfig.get(session.config);
    // One config object read for two sessions (a caller's own objects) must not share a meter.
    if (built?.sessionId !== session.id) {
      built = { sessionId: session.id, roles: new Map() };
      this.bySessionConfig.set(session.config, built);
    }
    let models = built.roles.get(role);
    if (!models) {
      models = await this.build(session, role);
      built.roles.set(role, models);
    }
    return models;
  }

  private async build(session: Session, role: ModelRole): Promise<RoleModels> {
    const cfg = roleConfig(session.config.llm, role);
    // Test overrides are metered and sampled too, like any models.
    const base =
      this.options.override ??
      (cfg.provider === 'builtin' ? await this.builtinFor(session) : this.llmFor(session));
    const { usageStore, judgeNoise } = this.options;
    // Sampling outside metering: each judge sample reserves and counts as a call of its own.
    const metered = usageStore ? meteredModels(base, { usageStore, session, role }) : base;
    return role === 'judge'
      ? judgeSampling(
          metered,
          session.config.llm.judgeSamples,
          session.config.refinement,
          // Not while recording or replaying: the calls made must not depend on what the
          // cluster learned before, or a replay would ask for calls the recording lacks.
          judgeNoise && session.config.llm.record.mode === 'off'
            ? { memory: judgeNoise, judge: judgeIdentity(session.config.llm) }
            : undefined,
        )
      : metered;
  }

  /**
   * Runs one job's `work` with a tally of the usage it passes on with its result (usage-tally.ts),
   * then counts what it did not pass on. When `work` throws, its error is the one thrown.
   */
  async withUsageTally<T>(sessionId: string, work: (tally: UsageTally) => Promise<T>): Promise<T> {
    const tally = new UsageTally();
    const { usageStore } = this.options;
    let result: T;
    try {
      result = await work(tally);
    } catch (error) {
      // The job's own error decides its retry; a count lost with it (Redis gone) is lost anyway.
      if (usageStore) await tally.settleRest(usageStore, sessionId).catch(() => undefined);
      throw error;
    }
    if (usageStore) await tally.settleRest(usageStore, sessionId);
    return result;
  }

  /** A session ended (announced by its coordinator): its calls in flight here stop now. */
  sessionEnded(sessionId: string, state: SessionState): void {
    this.cancellation?.ended(sessionId, state);
  }

  /**
   * The controls of one execution of `taskId`. The session is watched through the same shared
   * SessionCancellation as the real-model calls (one poll per session with work in flight), so
   * cancelling a session also stops a running agent loop or coding-agent command.
   */
  forExecution(session: Session, taskId: string, jobSignal?: AbortSignal): ExecutionControls {
    describeQuotaSession(session);
    const lease = this.cancellation?.watch(session.id);
    const signals = [jobSignal, lease?.signal].filter((s): s is AbortSignal => s !== undefined);
    // AbortSignal.any only when there are two to combine: it is not free on every task.
    const signal = signals.length === 1 ? (signals[0] as AbortSignal) : AbortSignal.any(signals);
    const { usageStore } = this.options;
    return {
      signal,
      sessionFinished: () => lease?.signal.aborted === true,
      meterChat: (provider) =>
        usageStore
          ? meteredChat(provider, { usageStore, session, role: 'worker', taskId })
          : provider,
      limitChat: (provider, config) => {
        const { quotas, httpAttempts } = this.options;
        const gated = quotas
          ? quotas.gate(provider, 'worker', config, this.options.env ?? process.env)
          : provider;
        const counted = httpAttempts
          ? countHttpAttempts(
              gated,
              { provider: config.provider, model: config.model, role: 'worker' },
              httpAttempts,
            )
          : gated;
        return tracedChat(
          counted,
          {
            provider: config.provider,
            model: config.model,
            role: 'worker',
            baseUrl: config.baseUrl,
          },
          this.options.modelCalls,
        );
      },
      release: () => lease?.release(),
    };
  }

  private llmFor(session: Session): RoleModels {
    const roleConfigs: LlmRoleConfigs = sessionRoleConfigs(session.config);
    const { maxRepairAttempts, record } = session.config.llm;
    const { logprobScores } = session.config.llm.judgeSamples;
    const key = canonicalJson({ roleConfigs, maxRepairAttempts, record, logprobScores });
    let models = this.llmByConfig.get(key);
    if (!models) {
      models = createLlmModels(roleConfigs, {
        maxRepairAttempts,
        record,
        logprobScores,
        ...(this.options.env ? { env: this.options.env } : {}),
        ...(this.options.quotas ? { quotas: this.options.quotas } : {}),
        onFormatFallback: (fallback) =>
          this.options.logger?.warn(
            fallback,
            `the ${fallback.role} model's server ignored structured output (${fallback.issues}); ` +
              `this pod now puts the schema in its prompts; set llm.${fallback.role}.structuredOutput "prompt" to do so from the start`,
          ),
        ...(this.options.httpAttempts ? { httpAttempts: this.options.httpAttempts } : {}),
        ...(this.options.modelCalls ? { modelCalls: this.options.modelCalls } : {}),
      });
      if (this.cancellation) models = cancellableModels(models, this.cancellation);
      if (this.llmByConfig.size >= MAX_CACHED_CONFIGS) {
        const oldest = this.llmByConfig.keys().next().value;
        if (oldest !== undefined) this.llmByConfig.delete(oldest);
      }
      this.llmByConfig.set(key, models);
    }
    return models;
  }

  private builtinFor(session: Session): Promise<RoleModels> {
    const scenarioPath = session.config.llm.scenario ?? '';
    let models = this.builtinByScenario.get(scenarioPath);
    if (!models) {
      const latency = this.options.latencyMs;
      models = (async () =>
        createBuiltinModels({
          ...(scenarioPath ? { scenario: await loadScenarioFile(scenarioPath) } : {}),
          ...(latency !== undefined ? { latencyMs: latency } : {}),
        }))();
      // A scenario that fails to load is reported on every call, not cached as a rejection.
      models.catch(() => this.builtinByScenario.delete(scenarioPath));
      this.builtinByScenario.set(scenarioPath, models);
    }
    return models;
  }
}
