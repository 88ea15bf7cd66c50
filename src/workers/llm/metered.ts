import type { Session } from '../../shared/domain/session.js';
import type { TokenUsage } from '../../shared/domain/task.js';
import { MustWaitError, OrqError } from '../../shared/errors.js';
import type { Reservation, UsageStore } from '../../shared/store/usage-store.js';
import { NO_USAGE, usageOfFailure, type ChatProvider } from './chat.js';
import { isFailedAttempt, onHttpAttempts } from './http-attempts.js';
import { QuotaWaitError } from './quota.js';
import { outputCap, roleConfig, type ModelRole } from '../../shared/config/roles.js';
import { estimateInputTokens } from './token-estimate.js';
import {
  BUDGET_RESUME_HINT,
  budgetLimits,
  priceOf,
  reservationFor,
  reservationLeaseMs,
  reservationSum,
  roleModel,
  turnExtra,
  usdMicros,
  type CallEstimate,
} from '../../shared/budget.js';
import type { ModelCall, ModelCallRequests, ReserveTurn, RoleModels } from './types.js';
import type { UsageTally } from './usage-tally.js';

/**
 * Cost control (issue 4) as a decorator over any RoleModels, builtin or real: every call's
 * tokens are recorded per session, role and task, and with a budget each call reserves what it
 * can use before it starts.
 *
 * What a budget guarantees. A call starts only after the reserve script granted its estimate E:
 * the tokens of its prompt as sent (schema and tools included) plus the output limit it sends
 * (budget.reserveTokensPerCall where it sends none, and for models that cannot tell, the
 * builtin), priced per side for USD. The script grants only while used + reserved + E <= limit,
 * atomically. When E fits beside what is used but not beside the reservations of calls in
 * flight, the call waits for them (its job is handed back, BudgetWaitError), as they give back
 * what they did not use when they settle; when E does not fit beside what is used, the session
 * is out of budget, and that refusal is sticky. A call uses at most its input and its output
 * limit, so it passes its reservation only by the error of the input estimate (a server that
 * tokenizes differently) and by repair turns: the final usage is at most
 *   limit + (calls in flight at the last grant) × max(0, A - E),
 * which is one call's worth or less unless many estimates are off. The session stops once the
 * next call's E no longer fits beside what is used: within E of the limit.
 */

/** How long a call that must wait for calls in flight is handed back before it asks again. */
export const BUDGET_RETRY_MS = 1_000;

/**
 * A call's reservation fits the session's budget only once calls in flight settle: its job is
 * handed back to its queue (registry.ts), holding no slot and spending no attempt.
 */
export class BudgetWaitError extends MustWaitError {
  constructor(detail: string, details: Record<string, unknown>) {
    const activity = 'waiting for budget room (calls in flight)';
    super('BUDGET_WAIT', activity, BUDGET_RETRY_MS, `${activity}: ${detail}`, {
      hint: 'The job runs again once calls in flight settle and give back what they did not use',
      details,
    });
    this.name = 'BudgetWaitError';
  }
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
  /** What the call can use, when known before it is made (only asked under a budget). */
  estimate?: (() => Promise<CallEstimate | undefined>) | undefined;
}

/**
 * The one accounting path of every metered call, whatever it calls (RoleModels or a bare
 * ChatProvider): reserve the estimate (with a budget), run the call, settle its real usage.
 */
export interface Meter {
  /**
   * `run` gets `reserveTurn` under a budget: what each repair turn of the call must reserve
   * before it is sent (the call's own reservation covers its first turn).
   */
  withReservation<T>(
    call: MeteredCall,
    run: (reserveTurn?: ReserveTurn) => Promise<T>,
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
  const leaseMs = reservationLeaseMs(session.config, role);
  const none: Reservation = { tokens: 0, usdMicros: 0 };

  async function reserve(call: MeteredCall): Promise<Reservation> {
    if (!limits) return none;
    if (limits.maxUsdMicros !== undefined && !price) {
      throw new OrqError('CONFIG_INVALID', `No price for model ${model} under budget.maxUsd`, {
        hint: `Add budget.prices["${model}"] ({ inputPerMTok, outputPerMTok }) or drop maxUsd`,
        details: { sessionId: session.id, role, model },
      });
    }
    return reserveExactly(call, reservationFor(budget, price, await call.estimate?.()));
  }

  /**
   * Reserves `estimate` for `call` under the budget's limits, or says why it cannot. `own`: what
   * the call holds already (a repair turn's), which no call in flight will give back.
   */
  async function reserveExactly(
    call: MeteredCall,
    estimate: Reservation,
    own?: Reservation,
  ): Promise<Reservation> {
    const { method, taskId } = call;
    if (!limits) return none;
    const outcome = await usageStore.reserve(session.id, estimate, limits, leaseMs, own);
    if (outcome.granted) return { ...estimate, lease: outcome.lease };
    const usd = (micros: number) => `$${micros / 1e6}`;
    const details = { sessionId: session.id, role, taskId, estimate: estimate.tokens, ...outcome };
    if (outcome.wait) {
      throw new BudgetWaitError(
        outcome.limit === 'tokens'
          ? `${outcome.usedTokens} used + ${outcome.reservedTokens} reserved + ${estimate.tokens} > maxTokens ${limits.maxTokens}`
          : `${usd(outcome.usedUsdMicros)} used + ${usd(outcome.reservedUsdMicros)} reserved + ${usd(estimate.usdMicros)} > maxUsd ${usd(limits.maxUsdMicros ?? 0)}`,
        details,
      );
    }
    const detail = outcome.alreadyExhausted
      ? `the ${outcome.limit === 'tokens' ? 'token' : 'USD'} budget is already exhausted`
      : outcome.limit === 'tokens'
        ? `${outcome.usedTokens} used + ${estimate.tokens} > maxTokens ${limits.maxTokens}`
        : `${usd(outcome.usedUsdMicros)} used + ${usd(estimate.usdMicros)} > maxUsd ${usd(limits.maxUsdMicros ?? 0)}`;
    throw new OrqError(
      'BUDGET_EXHAUSTED',
      `The ${role} call ${method}${taskId ? ` for task ${taskId}` : ''} cannot reserve its estimate within the session budget (${detail})`,
      {
        hint: `${BUDGET_RESUME_HINT}: orq resume ${session.id} --max-tokens <n> or --max-usd <usd> (HTTP: POST /sessions/${session.id}/resume with a budget)`,
        details,
      },
    );
  }

  /** Reserves, runs and settles the call, then counts the HTTP requests it sent, if any. */
  async function withReservation<T>(
    call: MeteredCall,
    run: (reserveTurn?: ReserveTurn) => Promise<T>,
    usageOf: (reply: T) => TokenUsage | undefined,
  ): Promise<T> {
    const requests = { total: 0, failed: 0 };
    const counted = (reserveTurn?: ReserveTurn) =>
      onHttpAttempts(
        (attempt) => {
          requests.total += 1;
          if (isFailedAttempt(attempt)) requests.failed += 1;
        },
        () => run(reserveTurn),
      );
    try {
      return await settled(call, counted, usageOf);
    } finally {
      // Informational: a count lost with Redis must not fail a call that was made and billed.
      await usageStore.addHttpRequests(session.id, role, requests).catch(() => undefined);
    }
  }

  async function settled<T>(
    call: MeteredCall,
    run: (reserveTurn?: ReserveTurn) => Promise<T>,
    usageOf: (reply: T) => TokenUsage | undefined,
  ): Promise<T> {
    const reserved = await reserve(call);
    const base = { reserved, role, ...(call.taskId !== undefined ? { taskId: call.taskId } : {}) };
    // What repair turns reserved on top: held until the call settles, then given back, as the
    // call's usage (every turn) is counted once, with its own reservation.
    const extras: Reservation[] = [];
    const reserveTurn: ReserveTurn | undefined = reserved.lease
      ? async (turn, spent) => {
          const held = [reserved, ...extras];
          const extra = turnExtra(held, spent, reservationFor(budget, price, turn), price);
          if (extra.tokens === 0 && extra.usdMicros === 0) return;
          extras.push(await reserveExactly(call, extra, reservationSum(held)));
        }
      : undefined;
    const releaseExtras = () =>
      Promise.all(
        extras.map((extra) =>
          usageStore.settle(session.id, {
            reserved: extra,
            role,
            usage: NO_USAGE,
            usdMicros: 0,
            unmade: true,
          }),
        ),
      );
    let reply: T;
    try {
      reply = await run(reserveTurn);
    } catch (error) {
      await releaseExtras();
      // Waiting for the provider's quota (its job is handed back): no call was made.
      if (error instanceof QuotaWaitError && !usageOfFailure(error)) {
        await usageStore.settle(session.id, {
          ...base,
          usage: NO_USAGE,
          usdMicros: 0,
          unmade: true,
        });
        throw error;
      }
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
    await releaseExtras();
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
  const metered = <M extends ModelCall, T>(
    method: M,
    request: ModelCallRequests[M],
    taskId: string | undefined,
    run: (reserveTurn?: ReserveTurn) => Promise<T>,
    usageOf: (reply: T) => TokenUsage | undefined,
    tally?: UsageTally,
  ) => {
    const estimateOf = models.estimate;
    const estimate = estimateOf ? () => estimateOf.call(models, method, request) : undefined;
    return meter.withReservation({ method, taskId, tally, estimate }, run, usageOf);
  };

  return {
    label: models.label,
    plan: (request) =>
      metered(
        'plan',
        request,
        undefined,
        (reserveTurn) => models.plan(reserveTurn ? { ...request, reserveTurn } : request),
        (r) => r.usage,
      ),
    judgePlan: (request) =>
      metered(
        'judgePlan',
        request,
        undefined,
        (reserveTurn) => models.judgePlan(reserveTurn ? { ...request, reserveTurn } : request),
        (r) => r.usage,
      ),
    execute: (request) =>
      metered(
        'execute',
        request,
        request.task.id,
        (reserveTurn) => models.execute(reserveTurn ? { ...request, reserveTurn } : request),
        (r) => r.tokenUsage,
        request.usageTally,
      ),
    judgeTask: (request) =>
      metered(
        'judgeTask',
        request,
        request.task.id,
        (reserveTurn) => models.judgeTask(reserveTurn ? { ...request, reserveTurn } : request),
        (r) => r.usage,
        request.usageTally,
      ),
    replan: (request) =>
      metered(
        'replan',
        request,
        request.task.id,
        (reserveTurn) => models.replan(reserveTurn ? { ...request, reserveTurn } : request),
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
  const config = roleConfig(options.session.config.llm, options.role);
  return {
    label: provider.label,
    complete: (request) =>
      meter.withReservation(
        {
          method: request.schemaName,
          taskId: options.taskId,
          estimate: async () => ({
            inputTokens: await estimateInputTokens(request, config),
            maxOutputTokens: outputCap(config),
          }),
        },
        () => provider.complete(request),
        (r) => r.usage,
      ),
  };
}
