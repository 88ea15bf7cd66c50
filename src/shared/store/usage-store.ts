import { randomUUID } from 'node:crypto';
import type { Result } from 'ioredis';
import type { RedisConnection } from '../redis.js';
import { z } from 'zod';
import type { TokenUsage } from '../domain/task.js';
import type { UnsettledUsage } from '../queues.js';
import { sessionKeys } from './keys.js';

/**
 * Token and cost accounting of one session, in one Redis hash (`prefix:s:{sid}:usage`, inside
 * the session's hash tag). Every write is one Lua script, so many workers of many pods can
 * count, reserve and settle at once without a read-modify-write race.
 *
 * Fields (integers; USD in micro-dollars so HINCRBY can add them exactly):
 *   in, out, usd_micros, calls, failed_calls, unpriced_calls  the whole session (tokens and USD
 *                                                            include what failed calls were billed)
 *   <role>:in|out|usd_micros|calls                            per role (planner, judge, ...)
 *   task:<taskId>:in|out|usd_micros|calls                     per task (worker, task judge, replanner)
 *   reserved_tokens, reserved_usd_micros                      estimates of calls in flight
 *   lapsed_leases                                             reservations given back because their
 *                                                            call never settled (a crashed pod)
 *   http_requests, http_failed, <role>:http_requests         HTTP requests the calls sent (an SDK
 *                                                            retries inside one call), and those
 *                                                            that got no 2xx answer
 *
 * Each reservation is also a lease in `prefix:s:{sid}:leases` (member `id|tokens|usd`, scored
 * by when it lapses): a call whose pod died never settles, and its estimate would be held for
 * ever, refusing later calls of a session that has spent little. Lapsed leases are given back
 * before every reservation and every read; a settlement gives back only a lease still held.
 *   grants, denied                                            reservations granted / refused
 *   budget_waits                                              reservations told to wait for calls in flight
 *   exhausted, exhausted_grants                               first refusal: why, and grants before it
 */

/** Refused reservations name what ran out. */
export type BudgetLimitKind = 'tokens' | 'usd';

export interface BudgetLimits {
  maxTokens?: number;
  maxUsdMicros?: number;
}

export interface Reservation {
  tokens: number;
  usdMicros: number;
  /** The lease that holds it (a granted reservation under a budget). */
  lease?: string;
}

export type ReserveOutcome =
  | { granted: true; lease: string }
  | {
      granted: false;
      /** The limit that would be crossed (for an already exhausted budget, the first one). */
      limit: BudgetLimitKind;
      usedTokens: number;
      reservedTokens: number;
      usedUsdMicros: number;
      reservedUsdMicros: number;
      /** An earlier reservation was refused already; this one was refused without a check. */
      alreadyExhausted: boolean;
      /**
       * The estimate fits within the limit but not beside the reservations of calls in flight:
       * not a stop (nothing is marked), ask again once they settle and give back what they
       * did not use.
       */
      wait: boolean;
    };

export interface Settlement {
  /** What the call reserved before it started (zeros when the session has no limit). */
  reserved: Reservation;
  role: string;
  taskId?: string;
  /** Tokens the call reported; for a call that failed, those its error says were billed. */
  usage: TokenUsage;
  usdMicros: number;
  /** The call threw: counted in failed_calls, not in calls; its billed tokens still count. */
  failed?: boolean;
  /** The call was never made (it waits for its provider's quota): only its reservation goes. */
  unmade?: boolean;
  /** The call's model has no price in budget.prices: its USD is unknown, counted here. */
  unpriced?: boolean;
}

/** Gives back the reservations of leases that lapsed (KEYS[1] usage, KEYS[2] leases). */
const LAPSE_LEASES = `
local function lapseLeases()
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local lapsed = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now)
  for _, lease in ipairs(lapsed) do
    local _, _, tokens, usd = string.find(lease, '|(%d+)|(%d+)$')
    if tonumber(tokens) ~= 0 then redis.call('HINCRBY', KEYS[1], 'reserved_tokens', -tonumber(tokens)) end
    if tonumber(usd) ~= 0 then redis.call('HINCRBY', KEYS[1], 'reserved_usd_micros', -tonumber(usd)) end
    redis.call('HINCRBY', KEYS[1], 'lapsed_leases', 1)
  end
  if #lapsed > 0 then redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now) end
  return now
end
`;

/**
 * A deleted session's record is gone (KEYS[3], meta): its calls still in flight reserve and
 * settle nothing, so they do not bring its usage hash and leases back.
 */
const UNLESS_DELETED = `
if redis.call('EXISTS', KEYS[3]) == 0 then return {1, '', 0, 0, 0, 0, 0, 0} end
`;

const RESERVE_SCRIPT = `${LAPSE_LEASES}${UNLESS_DELETED}
local key = KEYS[1]
local estT = tonumber(ARGV[1])
local estU = tonumber(ARGV[2])
local maxT = tonumber(ARGV[3])
local maxU = tonumber(ARGV[4])
local leaseId = ARGV[5]
local leaseMs = tonumber(ARGV[6])
-- What the caller holds already (a call reserving its repair turn): counted as its own, not
-- as calls in flight whose settling could make room.
local ownT = tonumber(ARGV[7] or '0') or 0
local ownU = tonumber(ARGV[8] or '0') or 0
local now = lapseLeases()
local function num(field) return tonumber(redis.call('HGET', key, field) or '0') end
local usedT = num('in') + num('out')
local resT = num('reserved_tokens')
local usedU = num('usd_micros')
local resU = num('reserved_usd_micros')
-- Once refused, always refused: a session that ran out stops, even if settlements free room.
local exhausted = redis.call('HGET', key, 'exhausted')
if exhausted then
  redis.call('HINCRBY', key, 'denied', 1)
  return {0, exhausted, usedT, resT, usedU, resU, 1, 0}
end
-- Out of budget: what is used leaves no room for the estimate, whatever calls in flight give back.
local limit = false
if maxT >= 0 and usedT + ownT + estT > maxT then
  limit = 'tokens'
elseif maxU >= 0 and usedU + ownU + estU > maxU then
  limit = 'usd'
end
if limit then
  redis.call('HSET', key, 'exhausted', limit, 'exhausted_grants', num('grants'))
  redis.call('HINCRBY', key, 'denied', 1)
  return {0, limit, usedT, resT, usedU, resU, 0, 0}
end
-- Room only once calls in flight settle (each gives back what it did not use): wait, no stop.
local busy = false
if maxT >= 0 and usedT + resT + estT > maxT then
  busy = 'tokens'
elseif maxU >= 0 and usedU + resU + estU > maxU then
  busy = 'usd'
end
if busy then
  redis.call('HINCRBY', key, 'budget_waits', 1)
  return {0, busy, usedT, resT, usedU, resU, 0, 1}
end
redis.call('HINCRBY', key, 'reserved_tokens', estT)
redis.call('HINCRBY', key, 'reserved_usd_micros', estU)
redis.call('HINCRBY', key, 'grants', 1)
local lease = leaseId .. '|' .. estT .. '|' .. estU
redis.call('ZADD', KEYS[2], now + leaseMs, lease)
return {1, lease, usedT, resT + estT, usedU, resU + estU, 0, 0}
`;

/**
 * Lua: adds one call's usage to the session's totals, its role's and its task's, in the usage
 * hash `key`. Zero amounts are not written (a missing field reads as 0): free models add no USD.
 * A failed call adds no call, only what it was billed. Then addUnsettledUsage: n usages of six
 * arguments each from ARGV[at] (unsettledUsageArgs); it returns the index after them.
 */
export const ADD_USAGE_LUA = `
local function addUsage(key, role, task, inT, outT, usd, failed, unpriced)
  local function add(scope)
    if inT ~= 0 then redis.call('HINCRBY', key, scope .. 'in', inT) end
    if outT ~= 0 then redis.call('HINCRBY', key, scope .. 'out', outT) end
    if usd ~= 0 then redis.call('HINCRBY', key, scope .. 'usd_micros', usd) end
    if not failed then redis.call('HINCRBY', key, scope .. 'calls', 1) end
  end
  add('')
  add(role .. ':')
  if task ~= '' then add('task:' .. task .. ':') end
  if unpriced then redis.call('HINCRBY', key, 'unpriced_calls', 1) end
end
local function addUnsettledUsage(key, at, n)
  for _ = 1, n do
    addUsage(key, ARGV[at], ARGV[at + 1], tonumber(ARGV[at + 2]), tonumber(ARGV[at + 3]),
      tonumber(ARGV[at + 4]), false, ARGV[at + 5] == '1')
    at = at + 6
  end
  return at
end
`;

/** ADD_USAGE_LUA's arguments for `usages`, six each. */
export function unsettledUsageArgs(usages: readonly UnsettledUsage[]): (string | number)[] {
  const args: (string | number)[] = [];
  for (const u of usages) {
    args.push(u.role, u.taskId ?? '', u.inputTokens, u.outputTokens, u.usdMicros);
    args.push(u.unpriced ? '1' : '0');
  }
  return args;
}

const SETTLE_SCRIPT = `${ADD_USAGE_LUA}
if redis.call('EXISTS', KEYS[3]) == 0 then return 0 end
local key = KEYS[1]
local resT = tonumber(ARGV[1])
local resU = tonumber(ARGV[2])
local inT = tonumber(ARGV[5])
local outT = tonumber(ARGV[6])
local usd = tonumber(ARGV[7])
local failed = ARGV[8] == '1'
local lease = ARGV[10]
-- A lease that lapsed was given back already: its reservation is not held any more.
local held = lease == '' or redis.call('ZREM', KEYS[2], lease) == 1
if held and resT ~= 0 then redis.call('HINCRBY', key, 'reserved_tokens', -resT) end
if held and resU ~= 0 then redis.call('HINCRBY', key, 'reserved_usd_micros', -resU) end
if ARGV[8] == 'unmade' then return 1 end
if failed then
  redis.call('HINCRBY', key, 'failed_calls', 1)
  -- A failed call counts only the tokens it was billed for (a reply cut off or unusable).
  if inT == 0 and outT == 0 and usd == 0 then return 1 end
end
addUsage(key, ARGV[3], ARGV[4], inT, outT, usd, failed, ARGV[9] == '1')
return 1
`;

/** Lua: adds one call's HTTP requests (ARGV role, requests, failed) unless the session is gone. */
const HTTP_REQUESTS_SCRIPT = `
if redis.call('EXISTS', KEYS[2]) == 0 then return 0 end
local requests = tonumber(ARGV[2])
local failed = tonumber(ARGV[3])
redis.call('HINCRBY', KEYS[1], 'http_requests', requests)
redis.call('HINCRBY', KEYS[1], ARGV[1] .. ':http_requests', requests)
if failed ~= 0 then redis.call('HINCRBY', KEYS[1], 'http_failed', failed) end
return 1
`;

const READ_SCRIPT = `${LAPSE_LEASES}
lapseLeases()
return redis.call('HGETALL', KEYS[1])
`;

declare module 'ioredis' {
  interface RedisCommander<Context> {
    orqUsageReserve(
      key: string,
      leases: string,
      meta: string,
      estTokens: number,
      estUsdMicros: number,
      maxTokens: number,
      maxUsdMicros: number,
      leaseId: string,
      leaseMs: number,
      ownTokens: number,
      ownUsdMicros: number,
    ): Result<[number, string, number, number, number, number, number, number], Context>;
    orqUsageRead(key: string, leases: string): Result<string[], Context>;
    orqUsageHttpRequests(
      key: string,
      meta: string,
      role: string,
      requests: number,
      failed: number,
    ): Result<number, Context>;
    orqUsageSettle(
      key: string,
      leases: string,
      meta: string,
      reservedTokens: number,
      reservedUsdMicros: number,
      role: string,
      taskId: string,
      inputTokens: number,
      outputTokens: number,
      usdMicros: number,
      failed: string,
      unpriced: string,
      lease: string,
    ): Result<number, Context>;
  }
}

const count = z.number().int().min(0);

export const UsageTotals = z.object({
  inputTokens: count,
  outputTokens: count,
  /** Estimated from budget.prices; calls to unpriced models add nothing. */
  usd: z.number().min(0),
  calls: count,
});
export type UsageTotals = z.infer<typeof UsageTotals>;

/** A session's usage as `client.get` and `orq status` show it. */
export const SessionUsage = z.object({
  total: UsageTotals,
  byRole: z.record(z.string(), UsageTotals),
  byTask: z.record(z.string(), UsageTotals),
  /** Estimates held by calls in flight. */
  reserved: z.object({ tokens: count, usd: z.number().min(0) }),
  failedCalls: count,
  unpricedCalls: count,
  /** Reservations granted (calls started under a budget) and refused. */
  grants: count,
  denied: count,
  /** Reservations given back because their call never settled (its pod died). */
  lapsedLeases: count,
  /**
   * The HTTP requests the calls sent, all roles and per role: a call is logical, and an SDK
   * retries a 429, a 5xx or a timeout inside it. `failed` got no answer or one other than 2xx.
   * Absent while no request was sent (builtin models, a replay).
   */
  httpRequests: z
    .object({ total: count, failed: count, byRole: z.record(z.string(), count) })
    .optional(),
  /** Set at the first refusal: the limit that ran out and how many grants came before it. */
  exhausted: z.object({ limit: z.enum(['tokens', 'usd']), afterGrants: count }).optional(),
});
export type SessionUsage = z.infer<typeof SessionUsage>;

const emptyTotals = (): UsageTotals => ({ inputTokens: 0, outputTokens: 0, usd: 0, calls: 0 });
const NO_LIMIT = -1;

/** Turns the raw hash into SessionUsage (pure, so it is tested without Redis). */
export function usageFromHash(hash: Record<string, string>): SessionUsage {
  const int = (field: string) => Number.parseInt(hash[field] ?? '0', 10) || 0;
  const usage: SessionUsage = {
    total: emptyTotals(),
    byRole: {},
    byTask: {},
    reserved: { tokens: int('reserved_tokens'), usd: int('reserved_usd_micros') / 1e6 },
    failedCalls: int('failed_calls'),
    unpricedCalls: int('unpriced_calls'),
    grants: int('grants'),
    denied: int('denied'),
    lapsedLeases: int('lapsed_leases'),
  };
  const limit = hash.exhausted;
  if (limit === 'tokens' || limit === 'usd') {
    usage.exhausted = { limit, afterGrants: int('exhausted_grants') };
  }
  if (hash.http_requests !== undefined) {
    usage.httpRequests = { total: int('http_requests'), failed: int('http_failed'), byRole: {} };
  }
  for (const [field, raw] of Object.entries(hash)) {
    // Task ids and role names never contain ':' (TaskId allows letters, digits, _ . -).
    const parts = field.split(':');
    const metric = parts.at(-1) ?? '';
    if (metric === 'http_requests' || metric === 'http_failed') {
      if (parts.length === 2 && usage.httpRequests) {
        usage.httpRequests.byRole[parts[0] ?? ''] = Number.parseInt(raw, 10) || 0;
      }
      continue;
    }
    let totals: UsageTotals | undefined;
    if (parts.length === 1) totals = usage.total;
    else if (parts.length === 2) totals = usage.byRole[parts[0] ?? ''] ??= emptyTotals();
    else if (parts.length === 3 && parts[0] === 'task')
      totals = usage.byTask[parts[1] ?? ''] ??= emptyTotals();
    if (!totals) continue;
    const value = Number.parseInt(raw, 10) || 0;
    if (metric === 'in') totals.inputTokens = value;
    else if (metric === 'out') totals.outputTokens = value;
    else if (metric === 'usd_micros') totals.usd = value / 1e6;
    else if (metric === 'calls') totals.calls = value;
  }
  return usage;
}

/** Reads and writes the per-session usage hash. Safe to share between roles of one process. */
export class UsageStore {
  constructor(
    readonly redis: RedisConnection,
    readonly prefix: string,
  ) {
    const commands = redis as unknown as Record<string, unknown>;
    if (typeof commands.orqUsageReserve !== 'function') {
      redis.defineCommand('orqUsageReserve', { numberOfKeys: 3, lua: RESERVE_SCRIPT });
    }
    if (typeof commands.orqUsageSettle !== 'function') {
      redis.defineCommand('orqUsageSettle', { numberOfKeys: 3, lua: SETTLE_SCRIPT });
    }
    if (typeof commands.orqUsageHttpRequests !== 'function') {
      redis.defineCommand('orqUsageHttpRequests', { numberOfKeys: 2, lua: HTTP_REQUESTS_SCRIPT });
    }
    if (typeof commands.orqUsageRead !== 'function') {
      redis.defineCommand('orqUsageRead', { numberOfKeys: 2, lua: READ_SCRIPT });
    }
  }

  /**
   * Atomically: grants the reservation when used + reserved + estimate stays within every
   * limit given, and then holds the estimate as reserved, under a lease that lapses after
   * `leaseMs` (a call that never settles gives it back then). When used + estimate alone passes
   * a limit it refuses, and every later reservation of the session is refused too; when only
   * the reservations of calls in flight leave no room it refuses with `wait` and marks nothing.
   */
  async reserve(
    sessionId: string,
    estimate: Reservation,
    limits: BudgetLimits,
    leaseMs: number,
    /** What the caller holds already (its call's reservations, for a repair turn). */
    own: Pick<Reservation, 'tokens' | 'usdMicros'> = { tokens: 0, usdMicros: 0 },
  ): Promise<ReserveOutcome> {
    const { usage, leases, meta } = sessionKeys(this.prefix, sessionId);
    const [
      granted,
      limit,
      usedTokens,
      reservedTokens,
      usedUsdMicros,
      reservedUsdMicros,
      before,
      wait,
    ] = await this.redis.orqUsageReserve(
      usage,
      leases,
      meta,
      estimate.tokens,
      estimate.usdMicros,
      limits.maxTokens ?? NO_LIMIT,
      limits.maxUsdMicros ?? NO_LIMIT,
      randomUUID(),
      Math.max(1, Math.round(leaseMs)),
      own.tokens,
      own.usdMicros,
    );
    if (Number(granted) === 1) return { granted: true, lease: String(limit) };
    return {
      granted: false,
      limit: limit === 'usd' ? 'usd' : 'tokens',
      usedTokens: Number(usedTokens),
      reservedTokens: Number(reservedTokens),
      usedUsdMicros: Number(usedUsdMicros),
      reservedUsdMicros: Number(reservedUsdMicros),
      alreadyExhausted: Number(before) === 1,
      wait: Number(wait) === 1,
    };
  }

  /** Atomically: releases the call's reservation and adds what it really used. */
  async settle(sessionId: string, settlement: Settlement): Promise<void> {
    const { usage, leases, meta } = sessionKeys(this.prefix, sessionId);
    await this.redis.orqUsageSettle(
      usage,
      leases,
      meta,
      settlement.reserved.tokens,
      settlement.reserved.usdMicros,
      settlement.role,
      settlement.taskId ?? '',
      settlement.usage.inputTokens,
      settlement.usage.outputTokens,
      settlement.usdMicros,
      settlement.unmade ? 'unmade' : settlement.failed ? '1' : '0',
      settlement.unpriced ? '1' : '0',
      settlement.reserved.lease ?? '',
    );
  }

  /** Counts one call's usage that was to be passed on and was not (usage-tally.ts). */
  async settleUnsettled(sessionId: string, usage: UnsettledUsage): Promise<void> {
    await this.settle(sessionId, {
      reserved: { tokens: 0, usdMicros: 0 },
      role: usage.role,
      ...(usage.taskId !== undefined ? { taskId: usage.taskId } : {}),
      usage: { inputTokens: usage.inputTokens, outputTokens: usage.outputTokens },
      usdMicros: usage.usdMicros,
      unpriced: usage.unpriced === true,
    });
  }

  /** Counts the HTTP requests one call of `role` sent (none are written for a call that sent none). */
  async addHttpRequests(
    sessionId: string,
    role: string,
    requests: { total: number; failed: number },
  ): Promise<void> {
    if (requests.total === 0) return;
    const { usage, meta } = sessionKeys(this.prefix, sessionId);
    await this.redis.orqUsageHttpRequests(usage, meta, role, requests.total, requests.failed);
  }

  /** The session's usage, lapsed leases given back first. */
  async read(sessionId: string): Promise<SessionUsage> {
    const { usage, leases } = sessionKeys(this.prefix, sessionId);
    const flat = await this.redis.orqUsageRead(usage, leases);
    const hash: Record<string, string> = {};
    for (let i = 0; i + 1 < flat.length; i += 2) hash[flat[i] as string] = flat[i + 1] as string;
    return usageFromHash(hash);
  }
}
