import type { Result } from 'ioredis';
import { RateLimitConfig } from '../config/schema.js';
import type { QuotaView } from '../domain/quota.js';
import { defineScripts, type RedisConnection } from '../redis.js';
import {
  ANONYMOUS_CALLER,
  CLASS_SPAN,
  RESERVED_REQUESTS,
  SESSION_CREDIT,
  SPARSE_CALLS,
  summarizeLine,
  type LineEntry,
} from '../quota-line.js';

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
  | { granted: true }
  | {
      granted: false;
      reason: QuotaRefusal;
      /** About when its turn comes (ms): its place's share of the rate, or a pause's end. */
      waitMs: number;
      /** Its place in the limit's line (1 = next). */
      place: number;
    };

/** Who asks, for the limit's fair line (quota-line.ts). */
export interface LineCaller {
  /** The same for every try of one call, across hand-backs: it keeps the call's place. */
  callId: string;
  sessionId: string;
  tenant: string;
  /** lineClass: band, then steps before task work. */
  lineClass: number;
  /** pathLead of its task's critical path: how many of its session's calls it goes ahead of. */
  pathLead: number;
  /** Its tenant's weight (tenants.weights). */
  weight: number;
}

/**
 * How long past its expected turn a refused call keeps its place: a job handed back must come
 * back from the delayed set and find a worker slot. A pod that dies gives the place up after it.
 */
export const LINE_GRACE_MS = 15_000;

export interface QuotaStoreOptions {
  /** LINE_GRACE_MS unless set (tests). */
  lineGraceMs?: number;
}
/** A session's finish tag at a line is kept this long after its last call joined it. */
const LINE_IDLE_MS = 60_000;
/**
 * A session counts for its tenant at a line (its calls cost the tenant's sessions) while a call
 * of it waits and this long after its turn or its last call joined: a session that no longer
 * asks must not go on making its tenant's other sessions pay for it. A few calls' time at any
 * rate the line serves; its finish tag stays for LINE_IDLE_MS either way.
 */
const LINE_ACTIVE_MS = 1_000;

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
 * Shared by the scripts: a waiter's entry goes, and its session has one call fewer waiting. The
 * count is kept with the entries (same lifetime, same slot), so it is exact: a session's
 * entries in `waiters`, which SPARSE_CALLS is checked against.
 */
const FORGET_WAITER = `
local function forget_waiter(waiters, counts, id)
  local info = redis.call('HGET', waiters, id)
  if not info then return end
  redis.call('HDEL', waiters, id)
  local owner = string.match(info, '^[^|]*|[^|]*|[^|]*|([^|]*)|')
  if owner and redis.call('HINCRBY', counts, owner, -1) <= 0 then redis.call('HDEL', counts, owner) end
end
`;

/**
 * KEYS: state, slots, line, leases, waiters, fair, counts. ARGV: rpm, tpm, maxConcurrent, burstMs,
 * estimatedTokens, slotId, slotMs, then the call: callId, sessionId, tenant, class (quota-line.ts),
 * pathLead, weight, graceMs, idleMs.
 * Returns {1} granted, or {0, reason, waitMs, place}.
 *
 * The line (quota-line.ts): `line` ranks the waiting calls (member = call id, score = rank),
 * `leases` says until when each keeps its place (its pod may die), `waiters` holds each one's
 * `tag|since|tokens|sessionId|tenant`, `counts` how many of them each session has (its calls
 * waiting), `fair` the line's V and per session
 * `s|<id>` = `finish|kept until|counted until|credit spent|tenant`. A call is granted only if
 * the limit has room for it and for every call ranked ahead of it (the ones ahead take theirs
 * when they come back), so no call takes what one ahead waits for; a refused call keeps (or
 * takes) its place and learns when its turn should come. While calls wait, RESERVED_REQUESTS
 * are kept for calls spending their session's credit and for steps; a session has the credit
 * only while fewer than SPARSE_CALLS of its calls wait. With no line, a call with
 * room is granted without being tagged: the fast path of a limit that does not bind stays one
 * script of a few commands.
 */
const ACQUIRE_SCRIPT = `${REFILL}
local rpm, tpm, maxc = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local burst_ms, est, lease_ms = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[7])
local call, sid, tenant = ARGV[8], ARGV[9], ARGV[10]
local class, path_lead, weight = tonumber(ARGV[11]), tonumber(ARGV[12]), tonumber(ARGV[13])
local grace, idle = tonumber(ARGV[14]), tonumber(ARGV[15])
-- Numbers go to Redis as text: Lua's own %.14g would round a rank of 15 digits to tens.
local function exact(x) return string.format('%.17g', x) end
local now = now_ms()
local r, t, rcap, tcap, paused = refill(KEYS[1], now, rpm, tpm, burst_ms)
local need = math.min(est, tcap)
${FORGET_WAITER}
-- Waiters whose lease lapsed leave first: their pod died, or their job was cancelled.
local lapsed = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now)
for _, id in ipairs(lapsed) do
  redis.call('ZREM', KEYS[3], id)
  forget_waiter(KEYS[5], KEYS[7], id)
end
if #lapsed > 0 then redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now) end

local entry = redis.call('HGET', KEYS[5], call)
local start, score, ahead = nil, nil, 0
if entry then
  local rank = redis.call('ZRANK', KEYS[3], call)
  if rank then
    ahead = rank
    start = tonumber(string.match(entry, '^([^|]*)'))
  else
    entry = false
  end
end

-- A session's entry in the fair hash: finish tag, until when it is kept, until when it counts
-- for its tenant, whether its credit is spent (1) or not (0), tenant. Entries of three fields
-- (finish, kept, tenant) were written before the credit: it counts as spent.
local function session_entry(value)
  local f, alive, active, spent, tn = string.match(value, '^([^|]*)|([^|]*)|([^|]*)|([01])|(.*)$')
  if not f then
    f, alive, tn = string.match(value, '^([^|]*)|([^|]*)|(.*)$')
    active, spent = alive, '1'
  end
  return tonumber(f), tonumber(alive) or 0, tonumber(active) or 0, spent == '1', tn
end

-- The call's SFQ tag and cost: max(V, its session's finish), or for a session still spending its
-- credit, max(V - credit, finish); each call costs the tenant's sessions at the line over its
-- weight.
local function tag()
  local V = tonumber(redis.call('HGET', KEYS[6], 'V') or '0') or 0
  local flat = redis.call('HGETALL', KEYS[6])
  -- A session new to the line (or idle past LINE_IDLE_MS) has no finish tag.
  local peers, finish, active, spent = 1, nil, 0, false
  for i = 1, #flat, 2 do
    local field = flat[i]
    if string.sub(field, 1, 2) == 's|' then
      local f, alive, act, sp, tn = session_entry(flat[i + 1])
      if alive < now then
        redis.call('HDEL', KEYS[6], field)
      elseif string.sub(field, 3) == sid then
        finish, active, spent = f, act, sp
      elseif tn == tenant and act >= now then
        peers = peers + 1
      end
    end
  end
  -- The credit is had once: from its first call until the session's tags reach V. Then it starts
  -- at V at the lowest, so a session cannot win it back by pausing, and a tenant's sessions that
  -- come and go do not add credit up (FQ-CoDel keeps an emptied new flow on the old list for the
  -- same reason).
  if not spent and (tonumber(redis.call('HGET', KEYS[7], sid)) or 0) >= ${SPARSE_CALLS} then
    -- Found with a backlog: not a sparse flow, and no credit at all. Its tags, and those of its
    -- calls that wait, move back by the credit to where plain SFQ has them (a session's tags
    -- with the credit stay exactly SESSION_CREDIT below its tags without); only calls already
    -- granted keep having gone early. Once per session: it reads every waiter.
    spent = true
    if finish then
      finish = finish + ${SESSION_CREDIT}
      local flat = redis.call('HGETALL', KEYS[5])
      for i = 1, #flat, 2 do
        local st, rest = string.match(flat[i + 1], '^([^|]*)|(.*)$')
        if string.match(rest or '', '^[^|]*|[^|]*|([^|]*)|') == sid then
          redis.call('HSET', KEYS[5], flat[i], exact(tonumber(st) + ${SESSION_CREDIT}) .. '|' .. rest)
          redis.call('ZINCRBY', KEYS[3], ${SESSION_CREDIT}, flat[i])
        end
      end
    end
  end
  local s
  if spent then
    s = math.max(V, finish or V)
  else
    s = math.max(V - ${SESSION_CREDIT}, finish or (V - ${SESSION_CREDIT}))
  end
  local cost = peers / weight
  if s + cost >= V then spent = true end
  active = math.max(active, now + ${LINE_ACTIVE_MS})
  redis.call('HSET', KEYS[6], 's|' .. sid, exact(s + cost) .. '|' .. (now + idle) .. '|' .. active .. '|' .. (spent and '1' or '0') .. '|' .. tenant)
  redis.call('PEXPIRE', KEYS[6], ${STATE_TTL_MS})
  return s, s - cost * path_lead
end

if not entry and redis.call('ZCARD', KEYS[3]) > 0 then
  local key
  start, key = tag()
  score = class * ${CLASS_SPAN} + key
  ahead = redis.call('ZCOUNT', KEYS[3], '-inf', '(' .. exact(score))
end

local function refuse(reason, wait)
  wait = math.max(1, math.ceil(wait))
  redis.call('HINCRBY', KEYS[1], 'refused', 1)
  if not entry then
    if not start then
      local key
      start, key = tag()
      score = class * ${CLASS_SPAN} + key
    end
    redis.call('ZADD', KEYS[3], exact(score), call)
    -- Its place counts the calls of an equal rank whose ids sort first: they go first.
    ahead = redis.call('ZRANK', KEYS[3], call)
    local info = exact(start) .. '|' .. now .. '|' .. need .. '|' .. sid .. '|' .. tenant
    if redis.call('HSET', KEYS[5], call, info) == 1 then redis.call('HINCRBY', KEYS[7], sid, 1) end
  end
  local keep = now + wait + grace
  redis.call('ZADD', KEYS[4], keep, call)
  -- Its session counts for its tenant while it waits, however long, and a little past its turn.
  local s = redis.call('HGET', KEYS[6], 's|' .. sid)
  if s then
    local f, alive, active, spent, tn = session_entry(s)
    active = math.max(active, now + wait + ${LINE_ACTIVE_MS})
    redis.call('HSET', KEYS[6], 's|' .. sid, exact(f or 0) .. '|' .. math.max(alive, keep) .. '|' .. active .. '|' .. (spent and '1' or '0') .. '|' .. tn)
  end
  local last = redis.call('ZRANGE', KEYS[4], -1, -1, 'WITHSCORES')
  local lasts = tonumber(last[2]) + 1000
  redis.call('PEXPIREAT', KEYS[3], lasts)
  redis.call('PEXPIREAT', KEYS[4], lasts)
  redis.call('PEXPIREAT', KEYS[5], lasts)
  redis.call('PEXPIREAT', KEYS[7], lasts)
  return {0, reason, wait, ahead + 1}
end

local per_request = rpm > 0 and 60000 / rpm or 0
-- The buckets restart empty after a pause: the first request comes one refill after it ends.
if paused > now then return refuse('paused', paused - now + (ahead + 1) * per_request) end
-- While calls wait, the last requests of the bucket are kept for calls spending a session's
-- credit (a tag below V) and for steps: a backlog that binds leaves them (RESERVED_REQUESTS). A
-- call with no one waiting (not tagged) takes what there is.
local keep = 0
if rpm > 0 and class % 2 == 1 then
  local V = tonumber(redis.call('HGET', KEYS[6], 'V') or '0') or 0
  if start and start >= V then keep = math.min(${RESERVED_REQUESTS}, math.floor(rcap / 4)) end
end
if rpm > 0 and r < ahead + 1 + keep then
  return refuse('requests', (ahead + 1 + keep - r) * per_request)
end
if tpm > 0 then
  -- What the calls ahead need (the first 256 exactly, the rest at their average).
  local before = 0
  if ahead > 0 then
    local counted = math.min(ahead, 256)
    local ids = redis.call('ZRANGE', KEYS[3], 0, counted - 1)
    local infos = redis.call('HMGET', KEYS[5], unpack(ids))
    for _, info in ipairs(infos) do
      if info then before = before + (tonumber(string.match(info, '^[^|]*|[^|]*|([^|]*)')) or 0) end
    end
    before = before * ahead / counted
  end
  -- A call that reserves more than a full bucket waits for a full bucket, then runs into debt.
  if t < before + need then return refuse('tokens', (before + need - t) * 60000 / tpm) end
end
if maxc > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
  if redis.call('ZCARD', KEYS[2]) + ahead >= maxc then
    -- A slot frees when a call ends, which no one can tell: look again soon, or at the lapse;
    -- the farther back, the later, so a long line does not poll all at once.
    local first = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
    local lapse = first[2] and (tonumber(first[2]) - now) or 250
    return refuse('concurrent', math.min(250, lapse) * (1 + math.floor(ahead / maxc)))
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
if start then
  if entry then
    redis.call('ZREM', KEYS[3], call)
    redis.call('ZREM', KEYS[4], call)
    forget_waiter(KEYS[5], KEYS[7], call)
  end
  local V = tonumber(redis.call('HGET', KEYS[6], 'V') or '0') or 0
  if start > V then redis.call('HSET', KEYS[6], 'V', exact(start)) end
end
return {1}
`;

/**
 * KEYS: line, leases, waiters, counts. ARGV: call ids. They leave the line (granted elsewhere,
 * or done).
 */
const LEAVE_SCRIPT = `${FORGET_WAITER}
local left = 0
for _, id in ipairs(ARGV) do
  left = left + redis.call('ZREM', KEYS[1], id)
  redis.call('ZREM', KEYS[2], id)
  forget_waiter(KEYS[3], KEYS[4], id)
end
return left
`;

/**
 * KEYS: line, leases, waiters, fair, counts. ARGV: session id. Its session ended: every call of it leaves
 * the line now, not when its job comes back at its turn (a handed-back job of a cancelled
 * session holds its place until then, and the requests kept for it go unused), and it no
 * longer counts for its tenant. O(waiters): once per session end.
 */
const LEAVE_SESSION_SCRIPT = `
local flat = redis.call('HGETALL', KEYS[3])
local left = 0
for i = 1, #flat, 2 do
  if string.match(flat[i + 1], '^[^|]*|[^|]*|[^|]*|([^|]*)|') == ARGV[1] then
    redis.call('ZREM', KEYS[1], flat[i])
    redis.call('ZREM', KEYS[2], flat[i])
    redis.call('HDEL', KEYS[3], flat[i])
    left = left + 1
  end
end
redis.call('HDEL', KEYS[4], 's|' .. ARGV[1])
redis.call('HDEL', KEYS[5], ARGV[1])
return left
`;

/** KEYS: line, leases, waiters. Returns {now, ids in order, their infos} of the live waiters. */
const LINE_SCRIPT = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ids = redis.call('ZRANGE', KEYS[1], 0, -1)
local live, infos = {}, {}
for _, id in ipairs(ids) do
  local keep = tonumber(redis.call('ZSCORE', KEYS[2], id) or '0') or 0
  local info = redis.call('HGET', KEYS[3], id)
  if keep > now and info then
    live[#live + 1] = id
    infos[#infos + 1] = info
  end
end
return {now, live, infos}
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
      line: string,
      leases: string,
      waiters: string,
      fair: string,
      counts: string,
      rpm: number,
      tpm: number,
      maxConcurrent: number,
      burstMs: number,
      estimatedTokens: number,
      slotId: string,
      slotMs: number,
      callId: string,
      sessionId: string,
      tenant: string,
      lineClass: number,
      pathLead: number,
      weight: number,
      graceMs: number,
      idleMs: number,
    ): Result<[number, string?, number?, number?], Context>;
    orqQuotaLeave(
      line: string,
      leases: string,
      waiters: string,
      counts: string,
      ...callIds: string[]
    ): Result<number, Context>;
    orqQuotaLeaveSession(
      line: string,
      leases: string,
      waiters: string,
      fair: string,
      counts: string,
      sessionId: string,
    ): Result<number, Context>;
    orqQuotaLine(
      line: string,
      leases: string,
      waiters: string,
    ): Result<[number, string[], string[]], Context>;
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

/** The keys of one limit, all in its hash tag. */
export function quotaKeys(prefix: string, limitId: string) {
  const base = `${prefix}:quota:{${limitId}}`;
  return {
    state: `${base}:state`,
    slots: `${base}:slots`,
    line: `${base}:line`,
    leases: `${base}:leases`,
    waiters: `${base}:waiters`,
    fair: `${base}:fair`,
    counts: `${base}:counts`,
  };
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
  private readonly lineGraceMs: number;

  constructor(
    readonly redis: RedisConnection,
    readonly prefix: string,
    options: QuotaStoreOptions = {},
  ) {
    this.lineGraceMs = options.lineGraceMs ?? LINE_GRACE_MS;
    defineScripts(redis, {
      orqQuotaAcquire: [7, ACQUIRE_SCRIPT],
      orqQuotaLeave: [4, LEAVE_SCRIPT],
      orqQuotaLeaveSession: [5, LEAVE_SESSION_SCRIPT],
      orqQuotaLine: [3, LINE_SCRIPT],
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
    caller: LineCaller = { callId: leaseId, ...ANONYMOUS_CALLER },
  ): Promise<AcquireOutcome> {
    const keys = quotaKeys(this.prefix, limitId);
    const { rpm, tpm, burstMs } = rates(settings);
    const [granted, reason, waitMs, place] = await this.redis.orqQuotaAcquire(
      keys.state,
      keys.slots,
      keys.line,
      keys.leases,
      keys.waiters,
      keys.fair,
      keys.counts,
      rpm,
      tpm,
      settings.maxConcurrent ?? 0,
      burstMs,
      Math.max(0, Math.round(estimatedTokens)),
      leaseId,
      Math.max(1, Math.round(leaseMs)),
      caller.callId,
      caller.sessionId,
      caller.tenant,
      caller.lineClass,
      caller.pathLead,
      caller.weight,
      this.lineGraceMs,
      LINE_IDLE_MS,
    );
    if (granted === 1) return { granted: true };
    return {
      granted: false,
      reason: (reason ?? 'paused') as QuotaRefusal,
      waitMs: waitMs ?? 1,
      place: place ?? 1,
    };
  }

  /** These calls leave the limit's line: their job ended, or was cancelled, without them. */
  async leave(limitId: string, callIds: readonly string[]): Promise<number> {
    if (callIds.length === 0) return 0;
    const { line, leases, waiters, counts } = quotaKeys(this.prefix, limitId);
    return this.redis.orqQuotaLeave(line, leases, waiters, counts, ...callIds);
  }

  /**
   * The session ended: its calls leave the limit's line and it stops counting for its tenant.
   * Returns how many calls left.
   */
  async leaveSession(limitId: string, sessionId: string): Promise<number> {
    const { line, leases, waiters, fair, counts } = quotaKeys(this.prefix, limitId);
    return this.redis.orqQuotaLeaveSession(line, leases, waiters, fair, counts, sessionId);
  }

  /** The calls waiting in a limit's line now, first first. */
  async line(limitId: string): Promise<{ now: number; entries: LineEntry[] }> {
    const { line, leases, waiters } = quotaKeys(this.prefix, limitId);
    const [now, ids, infos] = await this.redis.orqQuotaLine(line, leases, waiters);
    const entries = ids.map((callId, i) => {
      const [, since, , sessionId, tenant] = (infos[i] ?? '').split('|');
      return {
        callId,
        sessionId: sessionId ?? '',
        tenant: tenant ?? 'default',
        since: Number(since) || now,
      };
    });
    return { now, entries };
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
        const [state, line] = await Promise.all([this.read(id, settings), this.line(id)]);
        const tenants = summarizeLine(line.entries, line.now);
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
          waiting: line.entries.length,
          line: tenants,
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
