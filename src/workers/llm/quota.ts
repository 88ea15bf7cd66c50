import { createHash, randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import type { LlmRoleConfig, RateLimitConfig } from '../../shared/config/schema.js';
import { MustWaitError } from '../../shared/errors.js';
import type { LineCaller, QuotaRefusal, QuotaStore } from '../../shared/store/quota-store.js';
import { ANONYMOUS_CALLER, lineClass, pathLead, tenantWeight } from '../../shared/quota-line.js';
import { currentQuotaCaller, laneIds, takeLane, type QuotaCaller } from './quota-caller.js';
import {
  observeRateLimits,
  resolveApiKey,
  usageOfFailure,
  type ChatCompletion,
  type ChatProvider,
  type ChatRequest,
} from './chat.js';
import { type ModelRole, DEFAULT_ANTHROPIC_MAX_TOKENS } from '../../shared/config/roles.js';
import { rateLimitPauseMs } from './rate-limit-headers.js';
import { estimateInputTokens } from './token-estimate.js';

/**
 * Provider quotas shared by every pod and role (issue 33). A role whose provider setting has a
 * `rateLimit` calls its model through `ProviderQuotas.gate`: before each request it takes a
 * request, an estimate of the tokens and a slot from the limit in Redis (quota-store.ts), after
 * it settles the tokens the provider reported and frees the slot; a 429 pauses the limit for
 * every pod until the time the provider gives (rate-limit-headers.ts). A call that must wait
 * takes a place in the limit's fair line (issue 46, quota-line.ts) as its job's call
 * (quota-caller.ts), and learns when its turn comes. A short wait is slept here; a longer one
 * throws QuotaWaitError, and the role's job is handed back to its queue as delayed until its
 * turn (registry.ts) instead of holding its worker slot and lock; it keeps its place.
 */

/** Which quota a call spends: one per provider kind, base URL and API key. */
export interface ProviderLimit {
  /** Hex digest of kind, base URL and the key's hash: the Redis hash tag of its keys. */
  id: string;
  /** How people see it: `openai api.openai.com/v1 key 3f2a9c1b`; never the key itself. */
  name: string;
}

const DEFAULT_BASE_URL = {
  openai: 'https://api.openai.com/v1',
  anthropic: 'https://api.anthropic.com',
} as const;

const sha256 = (text: string) => createHash('sha256').update(text).digest('hex');

/** The limit of a provider kind at a base URL with an API key (only a hash of it is kept). */
export function providerLimit(
  kind: 'openai' | 'anthropic',
  baseUrl: string | undefined,
  apiKey: string,
): ProviderLimit {
  const url = (baseUrl ?? DEFAULT_BASE_URL[kind]).replace(/\/+$/, '');
  const keyHash = sha256(`orq-quota-key|${apiKey}`).slice(0, 8);
  return {
    id: sha256(`${kind}|${url}|${keyHash}`).slice(0, 16),
    name: `${kind} ${url.replace(/^https?:\/\//, '')} key ${keyHash}`,
  };
}

/** A call must wait for its provider's quota longer than a job should sleep. */
export class QuotaWaitError extends MustWaitError {
  constructor(
    readonly limit: ProviderLimit,
    readonly reason: QuotaRefusal | 'throttled',
    waitMs: number,
    cause?: unknown,
    /** Its call's place in the limit's line (1 = next); none after a 429. */
    readonly place?: number,
  ) {
    const activity = `waiting for quota (${limit.name})${place ? `, place ${place}` : ''}`;
    super('QUOTA_WAIT', activity, waitMs, `${activity}: ${REASONS[reason]}`, {
      hint: 'The job is handed back to its queue and runs when its turn in the line comes; raise llm.<role>.rateLimit if the provider allows more',
      details: {
        limit: limit.name,
        limitId: limit.id,
        reason,
        waitMs,
        ...(place ? { place } : {}),
      },
      cause,
    });
    this.name = 'QuotaWaitError';
  }

  /**
   * When the job runs again: at its turn, with little jitter (the line spreads the waiters
   * already, and a late one only lets the bucket fill for it).
   */
  override retryAt(now: number = Date.now()): number {
    return now + this.waitMs + Math.round(Math.random() * Math.min(100, this.waitMs / 20));
  }
}

const REASONS: Record<QuotaRefusal | 'throttled', string> = {
  paused: 'paused after a 429',
  throttled: 'the provider answered 429',
  requests: 'requests per minute spent',
  tokens: 'tokens per minute spent',
  concurrent: 'every concurrent slot taken',
};

/** Output tokens reserved for an OpenAI call whose maxOutputTokens is unset (none is sent). */
export const DEFAULT_OUTPUT_ESTIMATE = 1024;

/**
 * Tokens reserved before a call: what it sends as the tokenizer counts it (prompts, schema,
 * tools: token-estimate.ts, the same count a budget reserves), and the output cap it sends,
 * which is how both providers count a request against their token limits until it ends
 * (Anthropic always sends max_tokens, DEFAULT_ANTHROPIC_MAX_TOKENS when maxOutputTokens is unset).
 */
export async function estimateTokens(
  request: Pick<ChatRequest, 'system' | 'user' | 'followUp' | 'schema' | 'tools'>,
  config: Pick<LlmRoleConfig, 'maxOutputTokens' | 'provider' | 'structuredOutput'>,
): Promise<number> {
  const output =
    config.maxOutputTokens ??
    (config.provider === 'anthropic' ? DEFAULT_ANTHROPIC_MAX_TOKENS : DEFAULT_OUTPUT_ESTIMATE);
  return (await estimateInputTokens(request, config)) + output;
}

/** Past the call's own time limit, how long its slot is held if its pod dies mid-call. */
export const SLOT_LEASE_MARGIN_MS = 5_000;

/** What a pod's metrics count of its quota waits (pod metrics). */
export interface QuotaEvents {
  /** A call found the quota short (or paused) and waited or handed its job back. */
  waited(limit: string, reason: QuotaRefusal | 'throttled'): void;
  /** A provider answered 429 under this limit. */
  throttled(limit: string): void;
}

/**
 * The longest wait slept inside a job, in all; a longer one hands the job back. Short: a job
 * sleeping holds its worker slot, and under a binding quota every slot can be held by calls
 * far back in the line while a call at its head has no slot to run in. A handed-back job comes
 * back at its turn (the line says when), so the hand-back costs two Redis calls, not the place.
 * 2 s before the line (issue 46): a small session's jobs then waited for slots behind the
 * backlog's sleepers (fair.quota_small_behind_big_ratio 2.7-3.4 in the first runs with 2 s,
 * 1.9 in the first with 0.5 s). 150 ms, about a model call: with 0.5 s a newcomer's task
 * judgements still came one per judge slot freed (100-150 ms apart) behind the backlog's
 * sleeping judgements, though the line had them first.
 */
export const MAX_IN_JOB_WAIT_MS = 150;

export interface ProviderQuotasOptions {
  /** Longest wait slept inside a job, in all; a longer one hands the job back (MAX_IN_JOB_WAIT_MS). */
  maxInJobWaitMs?: number;
  events?: QuotaEvents;
  /** Tenant weights at every line (tenants.weights): a tenant of weight 3 gets 3 shares. */
  weights?: Readonly<Record<string, number>>;
}

/** The quota gate of one process's model calls, over the shared limits in Redis. */
export class ProviderQuotas {
  private readonly maxInJobWaitMs: number;
  private readonly weights: Readonly<Record<string, number>>;
  /** The limits this process's calls used: where a job that ended may have left a place. */
  private readonly limitIds = new Set<string>();

  constructor(
    readonly store: QuotaStore,
    private readonly options: ProviderQuotasOptions = {},
  ) {
    this.maxInJobWaitMs = options.maxInJobWaitMs ?? MAX_IN_JOB_WAIT_MS;
    this.weights = options.weights ?? {};
  }

  /** `provider` under its config's rateLimit; as it is when the config sets none. */
  gate(
    provider: ChatProvider,
    role: ModelRole,
    config: LlmRoleConfig,
    env: NodeJS.ProcessEnv,
  ): ChatProvider {
    const settings = config.rateLimit;
    if (!settings || config.provider === 'builtin') return provider;
    const limit = providerLimit(config.provider, config.baseUrl, resolveApiKey(role, config, env));
    this.limitIds.add(limit.id);
    let registered: Promise<unknown> | undefined;
    return {
      label: provider.label,
      complete: (request) => {
        registered ??= this.store
          .register(limit.id, { name: limit.name, rateLimit: settings })
          .catch(() => (registered = undefined));
        return this.call(limit, settings, config, provider, request);
      },
    };
  }

  private async call(
    limit: ProviderLimit,
    settings: RateLimitConfig,
    config: LlmRoleConfig,
    provider: ChatProvider,
    request: ChatRequest,
  ): Promise<ChatCompletion> {
    const estimate = await estimateTokens(request, config);
    const leaseMs = request.timeoutMs + SLOT_LEASE_MARGIN_MS;
    const started = Date.now();
    await provider.ready?.();
    const caller = currentQuotaCaller();
    const lane = caller ? takeLane(caller) : undefined;
    const line = this.lineCaller(caller, lane?.callId ?? `call|${randomUUID()}`);
    // Whether the call holds a place in the line it has not been granted from yet.
    let waiting = false;
    try {
      for (;;) {
        const leaseId = randomUUID();
        const outcome = await this.store.acquire(
          limit.id,
          settings,
          estimate,
          leaseId,
          leaseMs,
          line,
        );
        if (!outcome.granted) {
          waiting = true;
          caller?.joined.add(limit.id);
          await this.waitOrHandBack(limit, outcome, started, request);
          continue;
        }
        waiting = false;
        let pauseMs: number | undefined;
        let reply: ChatCompletion;
        try {
          reply = await observeRateLimits(
            (headers) => (pauseMs = rateLimitPauseMs(headers)),
            () => provider.complete(request),
          );
        } catch (error) {
          const spent = usageOfFailure(error);
          await this.store.settle(
            limit.id,
            settings,
            estimate,
            spent ? spent.inputTokens + spent.outputTokens : 0,
            leaseId,
          );
          if (pauseMs === undefined || isOutOfCredit(error)) throw error;
          // Every pod of the limit waits until the provider's time, not only this call.
          const lasts = await this.store.pause(limit.id, pauseMs);
          this.options.events?.throttled(limit.name);
          await this.waitOrHandBack(
            limit,
            { reason: 'throttled', waitMs: lasts },
            started,
            request,
            error,
          );
          continue;
        }
        // The reply is billed and ours: a count lost with Redis must not lose it (the slot lapses).
        await this.store
          .settle(
            limit.id,
            settings,
            estimate,
            reply.usage.inputTokens + reply.usage.outputTokens,
            leaseId,
          )
          .catch(() => undefined);
        return reply;
      }
    } catch (error) {
      // Handed back, the call keeps its place for when its job comes back; stopped otherwise
      // (cancelled, Redis gone), it gives the place up now rather than when its lease lapses.
      if (waiting && !(error instanceof QuotaWaitError)) {
        await this.store.leave(limit.id, [line.callId]).catch(() => undefined);
      }
      throw error;
    } finally {
      lane?.release();
    }
  }

  /** The call's rank facts for the line: its job's, or an anonymous caller's. */
  private lineCaller(caller: QuotaCaller | undefined, callId: string): LineCaller {
    if (!caller) return { callId, ...ANONYMOUS_CALLER };
    const tenant = caller.tenant ?? ANONYMOUS_CALLER.tenant;
    return {
      callId,
      sessionId: caller.sessionId,
      tenant,
      lineClass: lineClass({ priority: caller.priority ?? 5, step: caller.step }),
      pathLead: pathLead(caller.criticalPath),
      weight: tenantWeight(this.weights, tenant),
    };
  }

  /**
   * A job ended (done, failed for good, or its session over) after one of its calls waited in
   * a line, in this run or one before a hand-back: whatever place it still holds is given up.
   * Only the limits this process used are known; a place left elsewhere lapses with its lease.
   */
  async leaveLines(jobId: string, limitIds: Iterable<string> = this.limitIds): Promise<void> {
    const ids = laneIds(jobId);
    await Promise.all([...limitIds].map((id) => this.store.leave(id, ids)));
  }

  /**
   * A session ended (cancelled, failed, done, blocked): its calls leave every limit's line now,
   * where its handed-back jobs would hold their places until their turns came.
   */
  async sessionEnded(sessionId: string): Promise<void> {
    const limits = Object.keys(await this.store.limits());
    await Promise.all(limits.map((id) => this.store.leaveSession(id, sessionId)));
  }

  /**
   * Sleeps out a short wait (with a little jitter, so the waiters of many pods do not all come
   * back at once); throws QuotaWaitError for one that would take this call past maxInJobWaitMs.
   * The wait is about when the call's turn in the line comes, so the handed-back jobs of a long
   * line come back one by one, each near its turn.
   */
  private async waitOrHandBack(
    limit: ProviderLimit,
    refusal: { reason: QuotaRefusal | 'throttled'; waitMs: number; place?: number },
    started: number,
    request: Pick<ChatRequest, 'signal'>,
    cause?: unknown,
  ): Promise<void> {
    const { reason, waitMs, place } = refusal;
    this.options.events?.waited(limit.name, reason);
    if (Date.now() - started + waitMs > this.maxInJobWaitMs) {
      throw new QuotaWaitError(limit, reason, waitMs, cause, place);
    }
    const jitter = Math.random() * Math.min(waitMs / 10, 50);
    await sleep(waitMs + jitter, undefined, request.signal ? { signal: request.signal } : {});
  }
}

/**
 * OpenAI answers 429 `insufficient_quota` when the account has no credit left: no wait ends
 * that, so it fails the call like any refusal instead of pausing everyone again and again.
 */
function isOutOfCredit(error: unknown): boolean {
  const cause = (error as { cause?: { code?: unknown; type?: unknown } } | undefined)?.cause;
  return cause?.code === 'insufficient_quota' || cause?.type === 'insufficient_quota';
}
