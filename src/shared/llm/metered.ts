import type { BudgetConfig, LlmConfig, ModelPrice, SessionConfig } from '../config/schema.js';
import type { Session } from '../domain/session.js';
import type { TokenUsage } from '../domain/task.js';
import { OrqError } from '../errors.js';
import type { Role } from '../queues.js';
import type { BudgetLimits, Reservation, UsageStore } from '../store/usage-store.js';
import { NO_USAGE, usageOfFailure, type ChatProvider } from './chat.js';
import { MODEL_ROLES, sessionRoleConfigs } from './role-config.js';
import type { RoleModels } from './types.js';
import type { UsageTally } from './usage-tally.js';

/**
 * Cost control (issue 4) as a decorator over any RoleModels, builtin or real: every call's
 * tokens are recorded per session, role and task, and with a budget each call reserves an
 * estimate before it starts.
 *
 * What "no overspending" means here. A call starts only after the reserve script granted its
 * estimate E (budget.reserveTokensPerCall, and E priced at the model's dearer rate for USD),
 * and the script grants only while used + reserved + E <= limit, atomically; the first refusal
 * is sticky, so once the budget is exhausted no call of the session starts again. A call's
 * actual usage A may still exceed its reservation (a model answers at length): after the last
 * grant only the calls then in flight settle, each adding A - E, so the final usage is at most
 *   limit + (calls in flight at the last grant) × max(0, A_max - E).
 * With E at least the largest call's usage the session never passes its limit at all.
 */

/** The roles that call models. */
export type ModelRole = Exclude<Role, 'coordinator'>;

/** Provider and model of a role: the role's override over llm.default. */
export function roleModel(llm: LlmConfig, role: ModelRole): { provider: string; model: string } {
  const override = llm[role];
  return {
    provider: override?.provider ?? llm.default.provider,
    model: override?.model ?? llm.default.model,
  };
}

const FREE: ModelPrice = { inputPerMTok: 0, outputPerMTok: 0 };

/** The model's price; the builtin provider (not an LLM) is free unless priced. */
export function priceOf(
  budget: BudgetConfig,
  provider: string,
  model: string,
): ModelPrice | undefined {
  return budget.prices[model] ?? (provider === 'builtin' ? FREE : undefined);
}

/**
 * USD of a usage in micro-dollars: tokens × USD-per-million-tokens is exactly micro-dollars.
 * Rounded up per call (after trimming float noise such as 100 × 0.07 = 7.000000000000001), so
 * the estimate never undercounts.
 */
export function usdMicros(usage: TokenUsage, price: ModelPrice): number {
  const exact = usage.inputTokens * price.inputPerMTok + usage.outputTokens * price.outputPerMTok;
  return Math.ceil(Math.round(exact * 1e6) / 1e6);
}

/** The limits of a budget in the store's units; undefined when the session has none. */
export function budgetLimits(budget: BudgetConfig): BudgetLimits | undefined {
  if (budget.maxTokens === undefined && budget.maxUsd === undefined) return undefined;
  return {
    ...(budget.maxTokens !== undefined ? { maxTokens: budget.maxTokens } : {}),
    ...(budget.maxUsd !== undefined ? { maxUsdMicros: Math.round(budget.maxUsd * 1e6) } : {}),
  };
}

/** What one call reserves: reserveTokensPerCall tokens, all priced at the dearer rate. */
export function reservationFor(budget: BudgetConfig, price: ModelPrice | undefined): Reservation {
  const tokens = budget.reserveTokensPerCall;
  const rate = price ? Math.max(price.inputPerMTok, price.outputPerMTok) : 0;
  return {
    tokens,
    usdMicros: usdMicros(
      { inputTokens: 0, outputTokens: tokens },
      { ...FREE, outputPerMTok: rate },
    ),
  };
}

/** Models of the session's roles with no price, which a maxUsd budget cannot account for. */
export function unpricedModels(config: SessionConfig): string[] {
  const missing = MODEL_ROLES.map((role) => roleModel(config.llm, role))
    .filter(({ provider, model }) => !priceOf(config.budget, provider, model))
    .map(({ model }) => model);
  return [...new Set(missing)];
}

/** How a budget refusal's hint begins (the CLI's own notice gives the command instead). */
export const BUDGET_RESUME_HINT = 'Resume it with a higher limit';

/** Past its longest run, how long a call's reservation is still held before it lapses. */
const LEASE_MARGIN_MS = 60_000;

/**
 * How long a reservation of the role's calls is held when its call never settles (its pod
 * died): past the longest a call can run (the role's effective time limit, the replanner's
 * replanning.timeoutSeconds included, for every repair turn) and a margin.
 */
export function reservationLeaseMs(config: SessionConfig, role: ModelRole): number {
  const { timeoutSeconds } = sessionRoleConfigs(config)[role];
  return timeoutSeconds * 1000 * (config.llm.maxRepairAttempts + 1) + LEASE_MARGIN_MS;
}

export interface MeterOptions {
  usageStore: UsageStore;
  session: Pick<Session, 'id' | 'config'>;
  /** The role the calls are made for: its model prices the calls, and names the usage. */
  role: ModelRole;
}

export type MeteredModelsOptions = MeterOptions;

/** One metered call: what it is, in errors, and the task its usage is counted for. */
export interface MeteredCall {
  method: string;
  taskId?: string | undefined;
  /**
   * Where the caller collects usage to pass on with its result: a call that holds no
   * reservation (no budget) is recorded there instead of settled on its own.
   */
  tally?: UsageTally | undefined;
}

/**
 * The one accounting path of every metered call, whatever it calls (RoleModels or a bare
 * ChatProvider): reserve the estimate (with a budget), run the call, settle its real usage.
 */
export interface Meter {
  withReservation<T>(
    call: MeteredCall,
    run: () => Promise<T>,
    usageOf: (reply: T) => TokenUsage | undefined,
  ): Promise<T>;
}

/** The meter of a session's calls for one role. */
export function createMeter(options: MeterOptions): Meter {
  const { usageStore, session, role } = options;
  const budget = session.config.budget;
  const { provider, model } = roleModel(session.config.llm, role);
  const price = priceOf(budget, provider, model);
  const limits = budgetLimits(budget);
  const estimate = reservationFor(budget, price);
  const leaseMs = reservationLeaseMs(session.config, role);
  const none: Reservation = { tokens: 0, usdMicros: 0 };

  async function reserve({ method, taskId }: MeteredCall): Promise<Reservation> {
    if (!limits) return none;
    if (limits.maxUsdMicros !== undefined && !price) {
      throw new OrqError('CONFIG_INVALID', `No price for model ${model} under budget.maxUsd`, {
        hint: `Add budget.prices["${model}"] ({ inputPerMTok, outputPerMTok }) or drop maxUsd`,
        details: { sessionId: session.id, role, model },
      });
    }
    const outcome = await usageStore.reserve(session.id, estimate, limits, leaseMs);
    if (outcome.granted) return { ...estimate, lease: outcome.lease };
    const usd = (micros: number) => `$${micros / 1e6}`;
    const detail = outcome.alreadyExhausted
      ? `the ${outcome.limit === 'tokens' ? 'token' : 'USD'} budget is already exhausted`
      : outcome.limit === 'tokens'
        ? `${outcome.usedTokens} used + ${outcome.reservedTokens} reserved + ${estimate.tokens} > maxTokens ${limits.maxTokens}`
        : `${usd(outcome.usedUsdMicros)} used + ${usd(outcome.reservedUsdMicros)} reserved + ${usd(estimate.usdMicros)} > maxUsd ${usd(limits.maxUsdMicros ?? 0)}`;
    throw new OrqError(
      'BUDGET_EXHAUSTED',
      `The ${role} call ${method}${taskId ? ` for task ${taskId}` : ''} cannot reserve its estimate within the session budget (${detail})`,
      {
        hint: `${BUDGET_RESUME_HINT}: orq resume ${session.id} --max-tokens <n> or --max-usd <usd> (HTTP: POST /sessions/${session.id}/resume with a budget)`,
        details: { sessionId: session.id, role, taskId, ...outcome },
      },
    );
  }

  async function withReservation<T>(
    call: MeteredCall,
    run: () => Promise<T>,
    usageOf: (reply: T) => TokenUsage | undefined,
  ): Promise<T> {
    const reserved = await reserve(call);
    const base = { reserved, role, ...(call.taskId !== undefined ? { taskId: call.taskId } : {}) };
    let reply: T;
    try {
      reply = await run();
    } catch (error) {
      // Release the reservation and count the failure, with what the call was billed for
      // anyway (a reply cut off, repair turns that never validated): a budget must see it.
      const spent = usageOfFailure(error) ?? NO_USAGE;
      await usageStore.settle(session.id, {
        ...base,
        usage: spent,
        usdMicros: price ? usdMicros(spent, price) : 0,
        unpriced: !price,
        failed: true,
      });
      throw error;
    }
    const usage = usageOf(reply) ?? { inputTokens: 0, outputTokens: 0 };
    const usd = price ? usdMicros(usage, price) : 0;
    if (call.tally && !reserved.lease) {
      call.tally.record({
        role,
        ...(call.taskId !== undefined ? { taskId: call.taskId } : {}),
        inputTokens: usage.inputTokens,
        outputTokens: usage.outputTokens,
        usdMicros: usd,
        ...(price ? {} : { unpriced: true }),
      });
      return reply;
    }
    await usageStore.settle(session.id, { ...base, usage, usdMicros: usd, unpriced: !price });
    return reply;
  }

  return { withReservation };
}

/** Wraps `models` so every call is reserved (with a budget), then counted. */
export function meteredModels(models: RoleModels, options: MeteredModelsOptions): RoleModels {
  const meter = createMeter(options);
  const metered = <T>(
    method: string,
    taskId: string | undefined,
    run: () => Promise<T>,
    usageOf: (reply: T) => TokenUsage | undefined,
    tally?: UsageTally,
  ) => meter.withReservation({ method, taskId, tally }, run, usageOf);

  return {
    label: models.label,
    plan: (request) =>
      metered(
        'plan',
        undefined,
        () => models.plan(request),
        (r) => r.usage,
      ),
    judgePlan: (request) =>
      metered(
        'judgePlan',
        undefined,
        () => models.judgePlan(request),
        (r) => r.usage,
      ),
    execute: (request) =>
      metered(
        'execute',
        request.task.id,
        () => models.execute(request),
        (r) => r.tokenUsage,
        request.usageTally,
      ),
    judgeTask: (request) =>
      metered(
        'judgeTask',
        request.task.id,
        () => models.judgeTask(request),
        (r) => r.usage,
        request.usageTally,
      ),
    replan: (request) =>
      metered(
        'replan',
        request.task.id,
        () => models.replan(request),
        (r) => r.usage,
      ),
  };
}

export interface MeteredChatOptions extends MeterOptions {
  /** The task the calls work on (the agent executor's), so its usage counts for that task. */
  taskId?: string;
}

/**
 * Wraps a ChatProvider a caller builds itself (the agent executor's model) so each request,
 * repair turns included, is reserved and counted like a call of the role's models.
 */
export function meteredChat(provider: ChatProvider, options: MeteredChatOptions): ChatProvider {
  const meter = createMeter(options);
  return {
    label: provider.label,
    complete: (request) =>
      meter.withReservation(
        { method: request.schemaName, taskId: options.taskId },
        () => provider.complete(request),
        (r) => r.usage,
      ),
  };
}
