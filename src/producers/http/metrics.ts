import { pingRedis, pipelineEach, type RedisConnection } from '../../shared/redis.js';
import { Counter, Gauge, Registry, collectDefaultMetrics } from 'prom-client';
import { SessionState } from '../../shared/domain/session.js';
import type { Logger } from '../../shared/logger.js';
import type { QueueSet } from '../../shared/queue-set.js';
import { sessionIndexKey, sessionKeys } from '../../shared/store/keys.js';

/** Job states reported per queue (Queue.getJobCounts at scrape time). */
export const QUEUE_STATES = ['waiting', 'active', 'delayed', 'failed', 'prioritized'] as const;
/** Sessions counted by state at scrape time: the newest this many (one pipelined HGET each). */
export const SESSION_SCAN_LIMIT = 10_000;

export interface ApiMetrics {
  readonly registry: Registry;
  readonly httpRequests: Counter<'method' | 'route' | 'status'>;
  readonly sessionsSubmitted: Counter<'outcome'>;
  readonly sessionActions: Counter<'action'>;
  readonly sseClients: Gauge;
}

export interface MetricsSources {
  redis: RedisConnection;
  prefix: string;
  queues: QueueSet;
  logger: Logger;
}

/** Roles whose model calls are counted in a session's usage hash (usage-store.ts). */
export const USAGE_ROLES = ['planner', 'judge', 'worker', 'replanner'] as const;

export interface SessionTotals {
  byState: Record<string, number>;
  /** Tokens by role and direction (in/out), summed over the scanned sessions. */
  tokens: { role: string; direction: 'in' | 'out'; count: number }[];
  usdMicros: number;
}

/**
 * Sessions by state and tokens spent, over the newest SESSION_SCAN_LIMIT sessions of the index:
 * one pipelined HGET of the state and one HMGET of the usage hash per session.
 */
export async function scanSessions(
  redis: RedisConnection,
  prefix: string,
  limit = SESSION_SCAN_LIMIT,
): Promise<SessionTotals> {
  const byState: Record<string, number> = Object.fromEntries(
    SessionState.options.map((s) => [s, 0]),
  );
  const usageFields = USAGE_ROLES.flatMap((role) => [`${role}:in`, `${role}:out`]);
  const sums = new Array<number>(usageFields.length).fill(0);
  let usdMicros = 0;
  const ids = await redis.zrevrange(sessionIndexKey(prefix), 0, limit - 1);
  const replies = await pipelineEach(redis, ids, (pipeline, id) => {
    const keys = sessionKeys(prefix, id);
    pipeline.hget(keys.meta, 'state');
    pipeline.hmget(keys.usage, 'usd_micros', ...usageFields);
  });
  for (let i = 0; i + 1 < replies.length; i += 2) {
    const [stateError, state] = replies[i]!;
    if (!stateError && typeof state === 'string') byState[state] = (byState[state] ?? 0) + 1;
    const [usageError, usage] = replies[i + 1]!;
    if (usageError || !Array.isArray(usage)) continue;
    const [usd, ...counts] = usage as (string | null)[];
    usdMicros += Number(usd ?? 0);
    counts.forEach((value, index) => (sums[index]! += Number(value ?? 0)));
  }
  const tokens = USAGE_ROLES.flatMap((role, r) => [
    { role, direction: 'in' as const, count: sums[2 * r]! },
    { role, direction: 'out' as const, count: sums[2 * r + 1]! },
  ]);
  return { byState, tokens, usdMicros };
}

/** One scan shared by the gauges of a scrape (prom-client collects them concurrently). */
function sharedPerScrape<T>(load: () => Promise<T>, ttlMs = 1_000): () => Promise<T> {
  let cached: { at: number; value: Promise<T> } | undefined;
  return () => {
    if (!cached || Date.now() - cached.at > ttlMs) {
      const value = load();
      cached = { at: Date.now(), value };
      value.catch(() => (cached = undefined));
    }
    return cached.value;
  };
}

/**
 * The API process's Prometheus metrics, in a registry of its own (several servers may share a
 * process). Queue depths and sessions by state are read from Redis when Prometheus scrapes, so
 * they are right whichever process moved the jobs; when Redis is down `orq_redis_up` is 0 and
 * those gauges are left out rather than failing the scrape.
 */
export function createApiMetrics(sources: MetricsSources): ApiMetrics {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry, prefix: 'orq_api_' });

  // prom-client collects all metrics concurrently: each gauge reads Redis on its own.
  new Gauge({
    name: 'orq_redis_up',
    help: '1 when Redis answered a PING during this scrape, 0 otherwise.',
    registers: [registry],
    async collect() {
      this.set((await pingRedis(sources.redis)) ? 1 : 0);
    },
  });

  new Gauge({
    name: 'orq_queue_jobs',
    help: 'Jobs in an orq queue by state, read at scrape time.',
    labelNames: ['queue', 'state'] as const,
    registers: [registry],
    async collect() {
      this.reset();
      try {
        for (const queue of sources.queues.all()) {
          const counts = await queue.getJobCounts(...QUEUE_STATES);
          for (const state of QUEUE_STATES) {
            this.set({ queue: queue.name, state }, counts[state] ?? 0);
          }
        }
      } catch (error) {
        sources.logger.warn({ err: (error as Error).message }, 'metrics: queue counts unavailable');
      }
    },
  });

  const totals = sharedPerScrape(() => scanSessions(sources.redis, sources.prefix));

  new Gauge({
    name: 'orq_sessions',
    help: `Sessions by state, read at scrape time (the newest ${SESSION_SCAN_LIMIT}).`,
    labelNames: ['state'] as const,
    registers: [registry],
    async collect() {
      this.reset();
      try {
        for (const [state, count] of Object.entries((await totals()).byState)) {
          this.set({ state }, count);
        }
      } catch (error) {
        sources.logger.warn(
          { err: (error as Error).message },
          'metrics: session counts unavailable',
        );
      }
    },
  });

  new Gauge({
    name: 'orq_llm_tokens',
    help: `Model tokens spent by role and direction (in/out), summed over the newest ${SESSION_SCAN_LIMIT} sessions at scrape time.`,
    labelNames: ['role', 'direction'] as const,
    registers: [registry],
    async collect() {
      this.reset();
      try {
        for (const { role, direction, count } of (await totals()).tokens) {
          this.set({ role, direction }, count);
        }
      } catch {
        // Logged by orq_sessions, which reads the same scan.
      }
    },
  });

  new Gauge({
    name: 'orq_llm_cost_usd',
    help: `Estimated model cost in USD (budget.prices), summed over the newest ${SESSION_SCAN_LIMIT} sessions at scrape time.`,
    registers: [registry],
    async collect() {
      try {
        this.set((await totals()).usdMicros / 1_000_000);
      } catch {
        this.reset();
      }
    },
  });

  return {
    registry,
    httpRequests: new Counter({
      name: 'orq_http_requests_total',
      help: 'HTTP requests answered by the API, by route and status.',
      labelNames: ['method', 'route', 'status'] as const,
      registers: [registry],
    }),
    sessionsSubmitted: new Counter({
      name: 'orq_api_sessions_submitted_total',
      help: 'POST /sessions answered: created, or existing (same idempotency key).',
      labelNames: ['outcome'] as const,
      registers: [registry],
    }),
    sessionActions: new Counter({
      name: 'orq_api_session_actions_total',
      help: 'Cancel, resume and delete requests accepted by the API.',
      labelNames: ['action'] as const,
      registers: [registry],
    }),
    sseClients: new Gauge({
      name: 'orq_api_sse_clients',
      help: 'Open server-sent-event streams.',
      registers: [registry],
    }),
  };
}
