import type { Result } from 'ioredis';
import { defineScripts, type RedisConnection } from '../redis.js';

/**
 * Slots of a tenant's cap on work jobs running at once (issue 33), leased in Redis so every
 * worker pod counts the same ones. One sorted set per tenant, `prefix:tenant:{<tenant>}:slots`:
 * member = the work job's id, score = when its lease lapses (ms, Redis clock). A lease is
 * renewed while its job runs and dropped when it ends; a pod killed mid-task stops renewing,
 * and its slot is dropped once the lease lapses (before every take), so nothing leaks.
 * The cap cannot live in the coordinator's script: one tenant's sessions live in different
 * Redis Cluster slots, and the set's hash tag is the tenant's.
 * In the same tag, for the tenant view: `...:waiting`, the jobs refused a slot (score = until
 * when they count as waiting), and `...:cap`, the cap the workers last applied.
 */

/** A tenant's cap as the workers apply it, for `orq status`, GET /tenants and /metrics. */
export interface TenantSlotsView {
  /** The cap a worker last applied (within a minute); absent when no worker capped it lately. */
  maxTasksInFlight?: number;
  /** Its work jobs holding a slot now. */
  running: number;
  /** Its work jobs handed back to wait for a slot (each counted until a lease after its refusal). */
  waitingForSlot: number;
}

export type SlotOutcome = { granted: true } | { granted: false; inFlight: number; waitMs: number };

/** `now`: the Redis clock in ms, so pods whose clocks differ agree on the leases. */
const NOW = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)`;

/** How long the cap a worker applied is shown after it last asked for a slot. */
const CAP_SHOWN_MS = 60_000;

/**
 * KEYS: slots, waiting, cap. ARGV: cap, holder, leaseMs, retryMs. Granted if the holder has the
 * slot already (a job redelivered after its pod died) or fewer than `cap` leases are live; else
 * the holder is noted as waiting, and told when to look again: `retryMs`, or sooner if a lease
 * lapses before.
 */
const ACQUIRE_SCRIPT = `${NOW}
local cap, lease_ms, retry_ms = tonumber(ARGV[1]), tonumber(ARGV[3]), tonumber(ARGV[4])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
redis.call('SET', KEYS[3], cap, 'PX', ${CAP_SHOWN_MS})
if not redis.call('ZSCORE', KEYS[1], ARGV[2]) then
  local held = redis.call('ZCARD', KEYS[1])
  if held >= cap then
    local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
    local wait = math.max(1, math.min(retry_ms, tonumber(first[2]) - now))
    redis.call('ZADD', KEYS[2], now + wait + lease_ms, ARGV[2])
    if redis.call('PTTL', KEYS[2]) < wait + lease_ms + 1000 then
      redis.call('PEXPIRE', KEYS[2], wait + lease_ms + 1000)
    end
    return {0, held, wait}
  end
end
redis.call('ZREM', KEYS[2], ARGV[2])
redis.call('ZADD', KEYS[1], now + lease_ms, ARGV[2])
if redis.call('PTTL', KEYS[1]) < lease_ms + 1000 then redis.call('PEXPIRE', KEYS[1], lease_ms + 1000) end
return {1}
`;

/** KEYS: slots. ARGV: holder, leaseMs. Extends a lease still held; 0 if it was lost. */
const RENEW_SCRIPT = `${NOW}
local lease_ms = tonumber(ARGV[2])
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not score or tonumber(score) <= now then return 0 end
redis.call('ZADD', KEYS[1], now + lease_ms, ARGV[1])
if redis.call('PTTL', KEYS[1]) < lease_ms + 1000 then redis.call('PEXPIRE', KEYS[1], lease_ms + 1000) end
return 1
`;

/** KEYS: slots, waiting, cap. Live leases, jobs waiting, the cap last applied (or false). */
const READ_SCRIPT = `${NOW}
return {
  redis.call('ZCOUNT', KEYS[1], '(' .. now, '+inf'),
  redis.call('ZCOUNT', KEYS[2], '(' .. now, '+inf'),
  redis.call('GET', KEYS[3]),
}
`;

declare module 'ioredis' {
  interface RedisCommander<Context> {
    orqTenantAcquire(
      slots: string,
      waiting: string,
      cap: string,
      maxTasksInFlight: number,
      holder: string,
      leaseMs: number,
      retryMs: number,
    ): Result<[number, number?, number?], Context>;
    orqTenantRenew(slots: string, holder: string, leaseMs: number): Result<number, Context>;
    orqTenantRead(
      slots: string,
      waiting: string,
      cap: string,
    ): Result<[number, number, string | null], Context>;
  }
}

/** The keys of a tenant's cap, in the tenant's hash tag. */
export function tenantKeys(prefix: string, tenant: string) {
  const base = `${prefix}:tenant:{${tenant}}`;
  return { slots: `${base}:slots`, waiting: `${base}:waiting`, cap: `${base}:cap` };
}

/** The scripts of tenant caps over one connection. Safe to share within a process. */
export class TenantSlots {
  constructor(
    readonly redis: RedisConnection,
    readonly prefix: string,
  ) {
    defineScripts(redis, {
      orqTenantAcquire: [3, ACQUIRE_SCRIPT],
      orqTenantRenew: [1, RENEW_SCRIPT],
      orqTenantRead: [3, READ_SCRIPT],
    });
  }

  /** Atomically: a slot of `tenant` for `holder` held `leaseMs`, or when to ask again. */
  async acquire(
    tenant: string,
    cap: number,
    holder: string,
    leaseMs: number,
    retryMs: number,
  ): Promise<SlotOutcome> {
    const keys = tenantKeys(this.prefix, tenant);
    const [granted, inFlight, waitMs] = await this.redis.orqTenantAcquire(
      keys.slots,
      keys.waiting,
      keys.cap,
      cap,
      holder,
      Math.round(leaseMs),
      Math.round(retryMs),
    );
    if (granted === 1) return { granted: true };
    return { granted: false, inFlight: inFlight ?? cap, waitMs: waitMs ?? retryMs };
  }

  /** Extends `holder`'s lease by `leaseMs` from now; false if it lapsed meanwhile. */
  async renew(tenant: string, holder: string, leaseMs: number): Promise<boolean> {
    const { slots } = tenantKeys(this.prefix, tenant);
    return (await this.redis.orqTenantRenew(slots, holder, Math.round(leaseMs))) === 1;
  }

  async release(tenant: string, holder: string): Promise<void> {
    await this.redis.zrem(tenantKeys(this.prefix, tenant).slots, holder);
  }

  /** Slots of `tenant` held now. */
  async inFlight(tenant: string): Promise<number> {
    return (await this.read(tenant)).running;
  }

  async read(tenant: string): Promise<TenantSlotsView> {
    const keys = tenantKeys(this.prefix, tenant);
    const [running, waitingForSlot, cap] = await this.redis.orqTenantRead(
      keys.slots,
      keys.waiting,
      keys.cap,
    );
    return { ...(cap !== null ? { maxTasksInFlight: Number(cap) } : {}), running, waitingForSlot };
  }
}
