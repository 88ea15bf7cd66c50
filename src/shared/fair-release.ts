import type { Result } from 'ioredis';
import { defineScripts, type RedisConnection } from './redis.js';
import { CRITICAL_PATH_ROOM, criticalPathBoost } from './critical-path-boost.js';

export { CRITICAL_PATH_ROOM, criticalPathBoost };
import { tenantWeight } from './tenant-weight.js';

/**
 * Fair release (issue 33, docs/fairness.md): the BullMQ priority each job is added with. BullMQ
 * serves the lowest number first (FIFO among equals), so the number is the job's place in line:
 *
 * - a session's priority (1 to 9) picks a band: every job of a higher priority goes first;
 * - inside a band, work jobs are ordered by start-time fair queuing (SFQ) over sessions, with
 *   each session's cost per job its tenant's number of active sessions over the tenant's weight
 *   (tenants.weights, 1 unless set), so tenants share by weight and a tenant's sessions share
 *   its part equally. A job's tag is
 *   max(V, the session's last finish tag); V is the highest tag a worker has started. The
 *   number is the tag's lead over V, so a session that just arrived goes before the backlog of
 *   one that has had its share;
 * - plan, judge and replan jobs take their band's first number (a judge-task job inherits its
 *   work job's): they are a session's steps between tasks, and a small session's plan
 *   judgement does not wait behind a big session's task judgements;
 * - a work job with a longer chain of dependents behind it (its critical path) goes ahead of the
 *   jobs its session released before it, by up to CRITICAL_PATH_ROOM tag units: a task that
 *   becomes ready on a session's critical path does not queue behind the session's short ones.
 *
 * The numbers only order jobs: a job's id, not its number, keeps it from running twice, so a
 * tag counted twice (a flush repeated after a crash) costs a little fairness, never a task.
 */
export const PRIORITY_BAND = 200_000;
/** BullMQ's highest priority number is 2^21 - 1: nine bands of PRIORITY_BAND fit under it. */
const HIGHEST_PRIORITY = 9;

/** The first BullMQ priority number of a session priority's band (1 to 9, 9 first). */
export function bandPriority(sessionPriority: number): number {
  return (HIGHEST_PRIORITY - sessionPriority) * PRIORITY_BAND + 1;
}

/** `job` (a plan or replan step) at the head of its session's priority band. */
export function inBand<J extends object>(
  session: { priority: number },
  job: J,
): J & { priority: number } {
  return { ...job, priority: bandPriority(session.priority) };
}

/**
 * A work job's BullMQ priority: its band's first number plus its lead over V and the room its
 * critical path did not take, capped to the band.
 */
export function fairPriority(sessionPriority: number, lead: number, criticalPath?: number): number {
  const place = Math.floor(lead) + CRITICAL_PATH_ROOM - criticalPathBoost(criticalPath);
  return bandPriority(sessionPriority) + Math.min(PRIORITY_BAND - 1, Math.max(0, place));
}

/** How often a process sends the highest tag its workers started (FairRelease.started). */
const V_UPDATE_MS = 20;

/** A session releasing nothing for this long is idle: it stops counting for its tenant. */
export const IDLE_MS = 60_000;

/**
 * KEYS: the fair hash. ARGV: session id, tenant, jobs to tag, now (ms), idle (ms), the tenant's
 * weight (a job costs its session the tenant's active sessions over the weight).
 * Fields: `V` (highest tag started), `s|<sessionId>` = `<finish tag>|<last release ms>|<tenant>`.
 * Returns V and the n jobs' leads over V. O(sessions released within the idle time).
 */
const TAGS_SCRIPT = `
local sid, tenant, n = ARGV[1], ARGV[2], tonumber(ARGV[3])
local now, idle = tonumber(ARGV[4]), tonumber(ARGV[5])
local weight = tonumber(ARGV[6]) or 1
local V = tonumber(redis.call('HGET', KEYS[1], 'V') or '0') or 0
local flat = redis.call('HGETALL', KEYS[1])
local peers = 1
local finish = 0
for i = 1, #flat, 2 do
  local field = flat[i]
  if string.sub(field, 1, 2) == 's|' then
    local f, at, t = string.match(flat[i + 1], '^([^|]*)|([^|]*)|(.*)$')
    local other = string.sub(field, 3)
    if (tonumber(at) or 0) < now - idle then
      redis.call('HDEL', KEYS[1], field)
    elseif other == sid then
      finish = tonumber(f) or 0
    elseif t == tenant then
      peers = peers + 1
    end
  end
end
local start = math.max(V, finish)
local cost = peers / weight
local leads = {}
for k = 0, n - 1 do leads[k + 1] = tostring(start + k * cost - V) end
redis.call('HSET', KEYS[1], 's|' .. sid, tostring(start + n * cost) .. '|' .. now .. '|' .. tenant)
return {tostring(V), leads}
`;

/** KEYS: the fair hash. ARGV: a started job's tag. V only moves forward. */
const STARTED_SCRIPT = `
local v = tonumber(redis.call('HGET', KEYS[1], 'V') or '0') or 0
if tonumber(ARGV[1]) > v then redis.call('HSET', KEYS[1], 'V', ARGV[1]) end
return 1
`;

declare module 'ioredis' {
  interface RedisCommander<Context> {
    orqFairTags(
      key: string,
      sessionId: string,
      tenant: string,
      n: number,
      now: number,
      idleMs: number,
      weight: number,
    ): Result<[string, string[]], Context>;
    orqFairStarted(key: string, tag: number): Result<number, Context>;
  }
}

/** The fair hash of one prefix: one key, so one Redis Cluster slot. */
export const fairKey = (prefix: string) => `{${prefix}}:fair`;

export interface ReleasedJob {
  /** The job's SFQ tag (V + lead), kept in its data so the worker can move V on. */
  tag: number;
  /** Its lead over V when it was released. */
  lead: number;
}

/** Start-time fair queuing tags in Redis, shared by every pod. */
export class FairRelease {
  private readonly key: string;
  /** The highest started tag sent to Redis by this process, and the one waiting to be sent. */
  private sentV = 0;
  private pendingV = 0;
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly redis: RedisConnection,
    prefix: string,
    private readonly now: () => number = Date.now,
    /** tenants.weights: a tenant of weight 3 gets three shares; 1 when not given. */
    private readonly weights: Readonly<Record<string, number>> = {},
  ) {
    this.key = fairKey(prefix);
    defineScripts(redis, { orqFairTags: [1, TAGS_SCRIPT], orqFairStarted: [1, STARTED_SCRIPT] });
  }

  /** Tags for `n` work jobs a session releases now, in the order they are released. */
  async release(sessionId: string, tenant: string, n: number): Promise<ReleasedJob[]> {
    const [v, leads] = await this.redis.orqFairTags(
      this.key,
      sessionId,
      tenant,
      n,
      this.now(),
      IDLE_MS,
      tenantWeight(this.weights, tenant),
    );
    return leads.map((l) => ({ tag: Number(v) + Number(l), lead: Number(l) }));
  }

  /** The sessions that released work within IDLE_MS, with their tenants. */
  async activeSessions(): Promise<Map<string, string>> {
    const fields = await this.redis.hgetall(this.key);
    const since = this.now() - IDLE_MS;
    const sessions = new Map<string, string>();
    for (const [field, value] of Object.entries(fields)) {
      if (!field.startsWith('s|')) continue;
      const [, at, ...tenant] = value.split('|');
      if (Number(at) >= since) sessions.set(field.slice(2), tenant.join('|'));
    }
    return sessions;
  }

  /**
   * A worker took a job with this tag: V moves up to it. Sent at most every V_UPDATE_MS per
   * process, with the highest tag taken meanwhile: a Redis call per job would be one more per
   * task on the busiest path, and a V a few milliseconds behind orders jobs alike.
   */
  started(tag: number): void {
    if (tag <= this.sentV) return;
    this.pendingV = Math.max(this.pendingV, tag);
    if (this.timer) return;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      const v = this.pendingV;
      this.sentV = Math.max(this.sentV, v);
      this.redis.orqFairStarted(this.key, v).catch(() => {
        // Only later jobs' order depends on it; the next job taken sends a V again.
        this.sentV = 0;
      });
    }, V_UPDATE_MS);
    this.timer.unref();
  }
}
