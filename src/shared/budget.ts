import type { BudgetConfig, LlmConfig, ModelPrice, SessionConfig } from './config/schema.js';
import {
  MODEL_ROLES,
  outputCap,
  roleConfig,
  sessionRoleConfigs,
  type ModelRole,
} from './config/roles.js';
import type { TokenUsage } from './domain/task.js';
import type { BudgetLimits, Reservation } from './store/usage-store.js';

/**
 * The arithmetic of a session's budget (issue 4): what a model call reserves, what it costs and
 * which models have no price. The workers' meter (workers/llm/metered.ts) reserves with it
 * before each call; the client and the config checks use it to refuse a budget that cannot
 * cover one call.
 */

/** The most a call can use, known before it is made: its prompt as sent and its output cap. */
export interface CallEstimate {
  inputTokens: number;
  /** The output limit sent with the call; undefined when none is (the server decides). */
  maxOutputTokens: number | undefined;
}

/** Provider and model of a role, as roleConfig merges them (llm.<role> over llm.default). */
export function roleModel(llm: LlmConfig, role: ModelRole): { provider: string; model: string } {
  const { provider, model } = roleConfig(llm, role);
  return { provider, model };
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

/**
 * What one call reserves: its estimated input plus its output limit, each priced at its own
 * rate; without an estimate, reserveTokensPerCall tokens priced at the dearer rate.
 */
export function reservationFor(
  budget: BudgetConfig,
  price: ModelPrice | undefined,
  estimate?: CallEstimate,
): Reservation {
  if (!estimate) {
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
  const usage = {
    inputTokens: estimate.inputTokens,
    outputTokens: estimate.maxOutputTokens ?? budget.reserveTokensPerCall,
  };
  return {
    tokens: usage.inputTokens + usage.outputTokens,
    usdMicros: price ? usdMicros(usage, price) : 0,
  };
}

/**
 * The least one call of the role reserves: the output limit it sends (Anthropic's default when
 * unset), or reserveTokensPerCall where it sends none and for the builtin provider.
 */
export function leastReservation(config: SessionConfig, role: ModelRole): number {
  const own = roleConfig(config.llm, role);
  const cap = own.provider === 'builtin' ? undefined : outputCap(own);
  return cap ?? config.budget.reserveTokensPerCall;
}

/**
 * What a repair turn must reserve on top of what its call holds: the turns so far (`spent`) and
 * this turn's estimate, less what the call's reservations already cover. 0 while they cover it.
 */
export function turnExtra(
  held: readonly Reservation[],
  spent: TokenUsage,
  turn: Reservation,
  price: ModelPrice | undefined,
): Reservation {
  const { tokens, usdMicros: usd } = reservationSum(held);
  const spentUsd = price ? usdMicros(spent, price) : 0;
  return {
    tokens: Math.max(0, spent.inputTokens + spent.outputTokens + turn.tokens - tokens),
    usdMicros: Math.max(0, spentUsd + turn.usdMicros - usd),
  };
}

/** What reservations hold together. */
export const reservationSum = (reservations: readonly Reservation[]): Reservation => ({
  tokens: reservations.reduce((sum, r) => sum + r.tokens, 0),
  usdMicros: reservations.reduce((sum, r) => sum + r.usdMicros, 0),
});

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
