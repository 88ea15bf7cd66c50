import type { Result } from 'ioredis';
import { RateLimitConfig } from '../config/schema.js';
import type { QuotaView } from '../domain/quota.js';
import { defineScripts, type RedisConnection } from '../redis.js';

/**
 * Provider quotas (issue 33) in Redis: one hash and one sorted set per limit, both inside the
 * limit's hash tag `{<limit id>}` so each script runs on one Redis Cluster slot, and every
 * check-and-take is one script, atomic across all pods.
 *
 * Why scripts of our own rather than rate-limiter-flexible: its Redis limiters count fixed
 * windows (a window's points come back all at once when it ends), so two windows' worth can be
 * sent within seconds across a boundary, and a provider whose quota refills continuously
 * (OpenAI documents its limits so) answers that with 429s, which is what this is meant to end.
 * It has no expiring per-holder slots either (maxConcurrent must survive a pod's kill -9), and
 * checking requests, tokens, slots and the shared 429 pause with three limiters one after
 * another is not atomic: a refusal by the last would have to refund the others. One script of
 * ~50 lines does all four at once, like the session store's.
 *
 * State hash `prefix:quota:{id}:state`:
 *   r, t          requests and tokens left in the buckets (may be below 0: a call used more
 *                 tokens than it reserved, a debt the refill pays off)
 *   ts            when the buckets were last refilled (ms, Redis clock)
 *   until         no call starts before this (ms, Redis clock): a 429's pause
 *   granted, refused, throttled, used_tokens   counters for `orq status` and /metrics
 * Slots `prefix:quota:{id}:slots`: member = one call's lease id, score = when it lapses. A
 * slot of a pod killed mid-call is dropped once its score passes (before every take), so
 * nothing leaks; a token reservation needs no lease: it is a debit of a bucket that refills
 * anyway, and a dead pod's estimate is only never corrected.
 * Times come from Redis (TIME), so pods whose clocks differ still agree.
 */

/** Buckets and slots of one call's check, in the script's units. */
export interface QuotaSettings {
  requestsPerMinute?: number | undefined;
  tokensPerMinute?: number | undefined;
  maxConcurrent?: number | undefined;
  /** Seconds of the per-minute rates a full bucket holds. */
  burstSeconds: number;
}

export type QuotaRefusal = 'paused' | 'requests' | 'tokens' | 'concurrent';

export type AcquireOutcome =
  { granted: true } | { granted: false; reason: QuotaRefusal; waitMs: number };

/** A limit as `orq status`, the HTTP API and /metrics show it. */
export interface QuotaState {
  requestsLeft?: number;
  tokensLeft?: number;
  inFlight: number;
  pausedForMs: number;
  granted: number;
  refused: number;
  throttled: number;
  usedTokens: number;
}

/** How long an idle limit's state is kept (its counters are what status shows). */
const STATE_TTL_MS = 7 * 24 * 3_600_000;

// Shared by the scripts: the buckets refilled up to now. rpm/tpm 0 means no such limit.
const REFILL = `
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function refill(key, now, rpm, tpm, burst_ms)
  local s = redis.call('HMGET', key, 'r', 't', 'ts', 'until')
  local elapsed = math.max(0, now - (tonumber(s[3]) or now))
  local rcap = math.max(1, rpm * burst_ms / 60000)
  local tcap = math.max(1, tpm * burst_ms / 60000)
  local r = math.min(rcap, (tonumber(s[1]) or rcap) + elapsed * rpm / 60000)
  local t = math.min(tcap, (tonumber(s[2]) or tcap) + elapsed * tpm / 60000)
  return r, t, rcap, tcap, tonumber(s[4]) or 0
end
`;

/**
 * KEYS: state, slots. ARGV: rpm, tpm, maxConcurrent, burstMs, estimatedTokens, leaseId, leaseMs.
 * Returns {1} granted, or {0, reason, waitMs}.
 */
const ACQUIRE_SCRIPT = `${REFILL}
local rpm, tpm, maxc = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local burst_ms, est, lease_ms = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[7])
local now = now_ms()
local r, t, rcap, tcap, paused = refill(KEYS[1], now, rpm, tpm, burst_ms)
local function refuse(reason, wait)
  redis.call('HINCRBY', KEYS[1], 'refused', 1)
  return {0, reason, math.max(1, math.ceil(wait))}
end
if paused > now then return refuse('paused', paused - now) end
if rpm > 0 and r < 1 then return refuse('requests', (1 - r) * 60000 / rpm) end
-- A call that reserves more than a full bucket waits for a full bucket, then runs into debt.
local need = math.min(est, tcap)
if tpm > 0 and t < need then return refuse('tokens', (need - t) * 60000 / tpm) end
if maxc > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
  if redis.call('ZCARD', KEYS[2]) >= maxc then
    -- A slot frees when a call ends, which no one can tell: look again soon, or at the lapse.
    local first = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
    return refuse('concurrent', math.min(250, tonumber(first[2]) - now))
  end
  redis.call('ZADD', KEYS[2], now + lease_ms, ARGV[6])
  -- The set outlives its longest lease (leases differ by the role's time limit), no more.
  local last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
  redis.call('PEXPIREAT', KEYS[2], tonumber(last[2]) + 1000)
end
if rpm > 0 then r = r - 1 end
if tpm > 0 then t = t - est end
redis.call('HSET', KEYS[1], 'r', r, 't', t, 'ts', now)
redis.call('HINCRBY', KEYS[1], 'granted', 1)
redis.call('PEXPIRE', KEYS[1], ${STATE_TTL_MS})
return {1}
`;

/**
 * KEYS: state, slots. ARGV: rpm, tpm, burstMs, reservedTokens, usedTokens, leaseId.
 * The bucket gets back what the call reserved and pays what it used; its slot is freed.
 */
const SETTLE_SCRIPT = `${REFILL}
local rpm, tpm, burst_ms = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local reserved, used = tonumber(ARGV[4]), tonumber(ARGV[5])
local now = now_ms()
redis.call('ZREM', KEYS[2], ARGV[6])
local r, t, rcap, tcap = refill(KEYS[1], now, rpm, tpm, burst_ms)
if tpm > 0 then t = math.min(tcap, t + reserved - used) end
redis.call('HSET', KEYS[1], 'r', r, 't', t, 'ts', now)
redis.call('HINCRBY', KEYS[1], 'used_tokens', used)
return 1
`;

/**
 * KEYS: state. ARGV: pauseMs. No call of the limit starts before now + pauseMs (a later pause
 * already set stands), and the buckets start empty after it: whoever else spends the same key's
 * quota has shown it is gone, so the calls resume at the refill rate, not in a burst.
 */
const PAUSE_SCRIPT = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local untl = math.max(now + tonumber(ARGV[1]), tonumber(redis.call('HGET', KEYS[1], 'until')) or 0)
redis.call('HSET', KEYS[1], 'until', untl, 'r', 0, 't', 0, 'ts', untl)
redis.call('HINCRBY', KEYS[1], 'throttled', 1)
redis.call('PEXPIRE', KEYS[1], ${STATE_TTL_MS})
return untl - now
`;

/** KEYS: state, slots. Returns {now, slots in flight, hash as a flat list}. */
const READ_SCRIPT = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
return {now, redis.call('ZCOUNT', KEYS[2], '(' .. now, '+inf'), redis.call('HGETALL', KEYS[1])}
`;

declare module 'ioredis' {
  interface RedisCommander<Context> {
    orqQuotaAcquire(
      state: string,
      slots: string,
      rpm: number,
      tpm: number,
      maxConcurrent: number,
      burstMs: number,
      estimatedTokens: number,
      leaseId: string,
      leaseMs: number,
    ): Result<[number, string?, number?], Context>;
    orqQuotaSettle(
      state: string,
      slots: string,
      rpm: number,
      tpm: number,
      burstMs: number,
      reservedTokens: number,
      usedTokens: number,
      leaseId: string,
    ): Result<number, Context>;
    orqQuotaPause(state: string, pauseMs: number): Result<number, Context>;
    orqQuotaRead(state: string, slots: string): Result<[number, number, string[]], Context>;
  }
}

/** The keys of one limit, in its hash tag. */
export function quotaKeys(prefix: string, limitId: string): { state: string; slots: string } {
  const base = `${prefix}:quota:{${limitId}}`;
  return { state: `${base}:state`, slots: `${base}:slots` };
}

/** Hash of every limit used so far: id → its description (JSON), for status and /metrics. */
export const quotaIndexKey = (prefix: string) => `${prefix}:quotas`;

const rates = (settings: QuotaSettings) => ({
  rpm: settings.requestsPerMinute ?? 0,
  tpm: settings.tokensPerMinute ?? 0,
  burstMs: settings.burstSeconds * 1000,
});

/** The scripts of provider quotas over one connection. Safe to share within a process. */
export class QuotaStore {
  constructor(
    readonly redis: RedisConnection,
    readonly prefix: string,
  ) {
    defineScripts(redis, {
      orqQuotaAcquire: [2, ACQUIRE_SCRIPT],
      orqQuotaSettle: [2, SETTLE_SCRIPT],
      orqQuotaPause: [1, PAUSE_SCRIPT],
      orqQuotaRead: [2, READ_SCRIPT],
    });
  }

  /**
   * Atomically: takes one request, `estimatedTokens` and a slot held for `leaseMs` (each that
   * the settings limit), or, if any is short or the limit is paused, nothing, with how long
   * until it may be there.
   */
  async acquire(
    limitId: string,
    settings: QuotaSettings,
    estimatedTokens: number,
    leaseId: string,
    leaseMs: number,
  ): Promise<AcquireOutcome> {
    const { state, slots } = quotaKeys(this.prefix, limitId);
    const { rpm, tpm, burstMs } = rates(settings);
    const [granted, reason, waitMs] = await this.redis.orqQuotaAcquire(
      state,
      slots,
      rpm,
      tpm,
      settings.maxConcurrent ?? 0,
      burstMs,
      Math.max(0, Math.round(estimatedTokens)),
      leaseId,
      Math.max(1, Math.round(leaseMs)),
    );
    if (granted === 1) return { granted: true };
    return { granted: false, reason: (reason ?? 'paused') as QuotaRefusal, waitMs: waitMs ?? 1 };
  }

  /** The call under `leaseId` ended having used `usedTokens`: correct the bucket, free the slot. */
  async settle(
    limitId: string,
    settings: QuotaSettings,
    reservedTokens: number,
    usedTokens: number,
    leaseId: string,
  ): Promise<void> {
    const { state, slots } = quotaKeys(this.prefix, limitId);
    const { rpm, tpm, burstMs } = rates(settings);
    await this.redis.orqQuotaSettle(
      state,
      slots,
      rpm,
      tpm,
      burstMs,
      Math.max(0, Math.round(reservedTokens)),
      Math.max(0, Math.round(usedTokens)),
      leaseId,
    );
  }

  /** Pauses every caller of the limit for `pauseMs`; returns how long the pause now lasts. */
  async pause(limitId: string, pauseMs: number): Promise<number> {
    return this.redis.orqQuotaPause(quotaKeys(this.prefix, limitId).state, Math.round(pauseMs));
  }

  /**
   * Notes a limit's description once per process (its name and the rateLimit of its calls),
   * for status and /metrics to list it.
   */
  async register(limitId: string, description: Record<string, unknown>): Promise<void> {
    await this.redis.hset(quotaIndexKey(this.prefix), limitId, JSON.stringify(description));
  }

  /** Every limit noted so far, by id. */
  async limits(): Promise<Record<string, Record<string, unknown>>> {
    const raw = await this.redis.hgetall(quotaIndexKey(this.prefix));
    const out: Record<string, Record<string, unknown>> = {};
    for (const [id, json] of Object.entries(raw)) {
      try {
        out[id] = JSON.parse(json) as Record<string, unknown>;
      } catch {
        // A field someone else wrote: not a limit of ours.
      }
    }
    return out;
  }

  /** Every limit used so far with its state now, by name. */
  async report(): Promise<QuotaView[]> {
    const limits = await this.limits();
    const views = await Promise.all(
      Object.entries(limits).map(async ([id, description]) => {
        const parsed = RateLimitConfig.safeParse(description.rateLimit);
        const settings = parsed.success ? parsed.data : undefined;
        const state = await this.read(id, settings);
        return {
          id,
          name: typeof description.name === 'string' ? description.name : id,
          ...(settings?.requestsPerMinute !== undefined
            ? { requestsPerMinute: settings.requestsPerMinute }
            : {}),
          ...(settings?.tokensPerMinute !== undefined
            ? { tokensPerMinute: settings.tokensPerMinute }
            : {}),
          ...(settings?.maxConcurrent !== undefined
            ? { maxConcurrent: settings.maxConcurrent }
            : {}),
          ...(settings ? { burstSeconds: settings.burstSeconds } : {}),
          ...state,
        };
      }),
    );
    return views.sort((a, b) => a.name.localeCompare(b.name));
  }

  /** A limit's state now (buckets as of now, for the rates given). */
  async read(limitId: string, settings?: QuotaSettings): Promise<QuotaState> {
    const { state, slots } = quotaKeys(this.prefix, limitId);
    const [now, inFlight, flat] = await this.redis.orqQuotaRead(state, slots);
    const hash: Record<string, string> = {};
    for (let i = 0; i + 1 < flat.length; i += 2) hash[flat[i] as string] = flat[i + 1] as string;
    const num = (field: string) => Number(hash[field] ?? 0) || 0;
    const until = num('until');
    const result: QuotaState = {
      inFlight,
      pausedForMs: Math.max(0, until - now),
      granted: num('granted'),
      refused: num('refused'),
      throttled: num('throttled'),
      usedTokens: num('used_tokens'),
    };
    if (settings) {
      const { rpm, tpm, burstMs } = rates(settings);
      const elapsed = Math.max(0, now - (num('ts') || now));
      const refilled = (field: string, rate: number) => {
        const cap = Math.max(1, (rate * burstMs) / 60_000);
        const level = hash[field] === undefined ? cap : num(field);
        return Math.floor(Math.min(cap, level + (elapsed * rate) / 60_000));
      };
      if (rpm > 0) result.requestsLeft = refilled('r', rpm);
      if (tpm > 0) result.tokensLeft = refilled('t', tpm);
    }
    return result;
  }
}
