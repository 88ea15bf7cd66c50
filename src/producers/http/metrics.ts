import { pingRedis, pipelineEach, type RedisConnection } from '../../shared/redis.js';
import { Counter, Gauge, Registry, collectDefaultMetrics } from 'prom-client';
import { SessionState } from '../../shared/domain/session.js';
import { IntegrationPhase } from '../../shared/domain/integration.js';
import type { Logger } from '../../shared/logger.js';
import type { QueueSet } from '../../shared/queue-set.js';
import { sessionIndexKey, sessionKeys } from '../../shared/store/keys.js';
import { QuotaStore } from '../../shared/store/quota-store.js';
import type { QuotaLineTenant, QuotaView } from '../../shared/domain/quota.js';
import { readTenantLoad } from '../../shared/store/tenant-load.js';

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
  /** Sessions whose integration is under way, by its phase (merging, judging, resolving, fixing). */
  byIntegrationPhase: Record<string, number>;
  /** Tokens by role and direction (in/out), summed over the scanned sessions. */
  tokens: { role: string; direction: 'in' | 'out'; count: number }[];
  /** Logical model calls by role (a call's SDK retries are inside it), and their HTTP requests. */
  calls: { role: string; calls: number; httpRequests: number }[];
  /** HTTP requests of model calls that got no answer or one other than 2xx. */
  httpFailed: number;
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
  const perRole = ['in', 'out', 'calls', 'http_requests'] as const;
  const usageFields = USAGE_ROLES.flatMap((role) => perRole.map((field) => `${role}:${field}`));
  const sums = new Array<number>(usageFields.length).fill(0);
  let usdMicros = 0;
  let httpFailed = 0;
  const byIntegrationPhase: Record<string, number> = Object.fromEntries(
    IntegrationPhase.options.map((p) => [p, 0]),
  );
  const ids = await redis.zrevrange(sessionIndexKey(prefix), 0, limit - 1);
  const replies = await pipelineEach(redis, ids, (pipeline, id) => {
    const keys = sessionKeys(prefix, id);
    pipeline.hmget(keys.meta, 'state', 'phase');
    pipeline.hmget(keys.usage, 'usd_micros', 'http_failed', ...usageFields);
  });
  for (let i = 0; i + 1 < replies.length; i += 2) {
    const [stateError, meta] = replies[i]!;
    const [state, phase] = Array.isArray(meta) ? (meta as (string | null)[]) : [];
    if (!stateError && typeof state === 'string') byState[state] = (byState[state] ?? 0) + 1;
    if (!stateError && typeof phase === 'string') {
      byIntegrationPhase[phase] = (byIntegrationPhase[phase] ?? 0) + 1;
    }
    const [usageError, usage] = replies[i + 1]!;
    if (usageError || !Array.isArray(usage)) continue;
    const [usd, failed, ...counts] = usage as (string | null)[];
    usdMicros += Number(usd ?? 0);
    httpFailed += Number(failed ?? 0);
    counts.forEach((value, index) => (sums[index]! += Number(value ?? 0)));
  }
  const at = (r: number, field: (typeof perRole)[number]) =>
    sums[r * perRole.length + perRole.indexOf(field)]!;
  const tokens = USAGE_ROLES.flatMap((role, r) => [
    { role, direction: 'in' as const, count: at(r, 'in') },
    { role, direction: 'out' as const, count: at(r, 'out') },
  ]);
  const calls = USAGE_ROLES.map((role, r) => ({
    role,
    calls: at(r, 'calls'),
    httpRequests: at(r, 'http_requests'),
  }));
  return { byState, byIntegrationPhase, tokens, calls, httpFailed, usdMicros };
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
    name: 'orq_sessions_integrating',
    help: `Sessions whose integration is under way, by phase (merging, judging: the final judgement, resolving: conflicts, fixing: what the final judge found missing, publishing: its pull request), read at scrape time (the newest ${SESSION_SCAN_LIMIT}).`,
    labelNames: ['phase'] as const,
    registers: [registry],
    async collect() {
      this.reset();
      try {
        for (const [phase, count] of Object.entries((await totals()).byIntegrationPhase)) {
          this.set({ phase }, count);
        }
      } catch {
        // Logged by orq_sessions, which reads the same scan.
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
    name: 'orq_llm_calls',
    help: `Logical model calls by role (a plan, a verdict; the SDK's retries are inside a call), summed over the newest ${SESSION_SCAN_LIMIT} sessions at scrape time. Failed calls are not counted.`,
    labelNames: ['role'] as const,
    registers: [registry],
    async collect() {
      this.reset();
      try {
        for (const { role, calls } of (await totals()).calls) this.set({ role }, calls);
      } catch {
        // Logged by orq_sessions, which reads the same scan.
      }
    },
  });

  new Gauge({
    name: 'orq_llm_http_requests',
    help: `HTTP requests of model calls by role, retries included, summed over the newest ${SESSION_SCAN_LIMIT} sessions at scrape time.`,
    labelNames: ['role'] as const,
    registers: [registry],
    async collect() {
      this.reset();
      try {
        for (const { role, httpRequests } of (await totals()).calls) {
          this.set({ role }, httpRequests);
        }
      } catch {
        // Logged by orq_sessions, which reads the same scan.
      }
    },
  });

  new Gauge({
    name: 'orq_llm_http_failed_requests',
    help: `HTTP requests of model calls that got no answer or one other than 2xx, summed over the newest ${SESSION_SCAN_LIMIT} sessions at scrape time.`,
    registers: [registry],
    async collect() {
      try {
        this.set((await totals()).httpFailed);
      } catch {
        this.reset();
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

  registerQuotaGauges(registry, sources);
  new Gauge({
    name: 'orq_tenant_tasks',
    help: 'Tasks per tenant at scrape time: in_flight (dispatched, not judged), waiting (ready, held back by scheduling.maxTasksInFlight) and waiting_for_quota (jobs of any role handed back to wait for a provider quota), and for a capped tenant waiting_for_cap (dispatched, handed back for a slot of tenants.maxTasksInFlight).',
    labelNames: ['tenant', 'state'] as const,
    registers: [registry],
    async collect() {
      this.reset();
      try {
        const load = await readTenantLoad(sources.redis, sources.prefix, sources.queues.fair);
        for (const t of load) {
          this.set({ tenant: t.tenant, state: 'in_flight' }, t.tasksInFlight);
          this.set({ tenant: t.tenant, state: 'waiting' }, t.tasksWaiting);
          this.set({ tenant: t.tenant, state: 'waiting_for_quota' }, t.jobsWaitingForQuota);
          if (t.tasksWaitingForSlot !== undefined)
            this.set({ tenant: t.tenant, state: 'waiting_for_cap' }, t.tasksWaitingForSlot);
        }
      } catch (error) {
        sources.logger.warn({ err: (error as Error).message }, 'metrics: tenant load unavailable');
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

/** A provider limit's figure as a gauge (issue 33); undefined leaves the limit out of it. */
const QUOTA_GAUGES: {
  name: string;
  help: string;
  value: (view: QuotaView) => number | undefined;
}[] = [
  {
    name: 'orq_quota_requests_per_minute',
    help: 'Requests per minute the limit allows (its rateLimit).',
    value: (v) => v.requestsPerMinute,
  },
  {
    name: 'orq_quota_requests_left',
    help: "Requests of the limit's bucket that may start now.",
    value: (v) => v.requestsLeft,
  },
  {
    name: 'orq_quota_tokens_per_minute',
    help: 'Tokens per minute the limit allows (its rateLimit).',
    value: (v) => v.tokensPerMinute,
  },
  {
    name: 'orq_quota_tokens_left',
    help: "Tokens of the limit's bucket left now (below 0 while a call's excess is paid off).",
    value: (v) => v.tokensLeft,
  },
  {
    name: 'orq_quota_max_concurrent',
    help: 'Calls the limit allows in flight at once (its rateLimit).',
    value: (v) => v.maxConcurrent,
  },
  {
    name: 'orq_quota_in_flight',
    help: 'Calls holding a slot of the limit now.',
    value: (v) => v.inFlight,
  },
  {
    name: 'orq_quota_paused_seconds',
    help: 'How long every pod still waits after a 429 (0 when not paused).',
    value: (v) => v.pausedForMs / 1000,
  },
  {
    name: 'orq_quota_granted_calls',
    help: 'Calls granted the quota since the limit was first used.',
    value: (v) => v.granted,
  },
  {
    name: 'orq_quota_waits',
    help: 'Times a call found the quota short or paused since the limit was first used.',
    value: (v) => v.refused,
  },
  {
    name: 'orq_quota_http_429',
    help: 'Answers 429 from the provider since the limit was first used.',
    value: (v) => v.throttled,
  },
  {
    name: 'orq_quota_used_tokens',
    help: 'Tokens the provider reported for the calls settled under the limit.',
    value: (v) => v.usedTokens,
  },
  {
    name: 'orq_quota_line_waiting',
    help: "Calls waiting in the limit's fair line now.",
    value: (v) => v.waiting,
  },
];

/** A limit's fair line per tenant (issue 46): calls waiting and the oldest wait. */
const QUOTA_LINE_GAUGES: {
  name: string;
  help: string;
  value: (tenant: QuotaLineTenant) => number;
}[] = [
  {
    name: 'orq_quota_line_tenant_waiting',
    help: "A tenant's calls waiting in the limit's fair line now.",
    value: (t) => t.waiting,
  },
  {
    name: 'orq_quota_line_oldest_wait_seconds',
    help: "How long a tenant's oldest call in the limit's fair line has waited.",
    value: (t) => t.oldestWaitMs / 1000,
  },
];

/**
 * A limit's fair line per session (issue 46): its calls waiting and the place of its first.
 * Only the sessions waiting at the scrape, the first LINE_SESSION_SERIES in line of each limit:
 * a series per session that ever waited would grow without bound.
 */
const QUOTA_LINE_SESSION_GAUGES: {
  name: string;
  help: string;
  value: (session: QuotaLineTenant['sessions'][number]) => number;
}[] = [
  {
    name: 'orq_quota_line_session_waiting',
    help: "A session's calls waiting in the limit's fair line now.",
    value: (s) => s.waiting,
  },
  {
    name: 'orq_quota_line_session_place',
    help: "The place of a session's first call in the limit's fair line (1 = next).",
    value: (s) => s.place,
  },
];

/** Sessions per limit the per-session line gauges show: the first in line. */
export const LINE_SESSION_SERIES = 50;

/** The provider limits' gauges, by limit name, read from Redis once per scrape. */
function registerQuotaGauges(registry: Registry, sources: MetricsSources): void {
  const store = new QuotaStore(sources.redis, sources.prefix);
  const report = sharedPerScrape(() => store.report());
  for (const gauge of QUOTA_GAUGES) {
    new Gauge({
      name: gauge.name,
      help: `${gauge.help} Read at scrape time, by limit (provider, base URL, key hash).`,
      labelNames: ['limit'] as const,
      registers: [registry],
      async collect() {
        this.reset();
        try {
          for (const view of await report()) {
            const value = gauge.value(view);
            if (value !== undefined) this.set({ limit: view.name }, value);
          }
        } catch (error) {
          if (gauge === QUOTA_GAUGES[0]) {
            sources.logger.warn({ err: (error as Error).message }, 'metrics: quotas unavailable');
          }
        }
      },
    });
  }
  for (const gauge of QUOTA_LINE_GAUGES) {
    new Gauge({
      name: gauge.name,
      help: `${gauge.help} Read at scrape time, by limit and tenant.`,
      labelNames: ['limit', 'tenant'] as const,
      registers: [registry],
      async collect() {
        this.reset();
        // The limits' gauges above log a failed read once.
        const views = await report().catch(() => []);
        for (const view of views) {
          for (const t of view.line)
            this.set({ limit: view.name, tenant: t.tenant }, gauge.value(t));
        }
      },
    });
  }
  for (const gauge of QUOTA_LINE_SESSION_GAUGES) {
    new Gauge({
      name: gauge.name,
      help: `${gauge.help} Read at scrape time, by limit, tenant and session; the first ${LINE_SESSION_SERIES} sessions in line.`,
      labelNames: ['limit', 'tenant', 'session'] as const,
      registers: [registry],
      async collect() {
        this.reset();
        const views = await report().catch(() => []);
        for (const view of views) {
          const sessions = view.line
            .flatMap((t) => t.sessions.map((s) => ({ tenant: t.tenant, ...s })))
            .sort((a, b) => a.place - b.place)
            .slice(0, LINE_SESSION_SERIES);
          for (const s of sessions) {
            this.set({ limit: view.name, tenant: s.tenant, session: s.sessionId }, gauge.value(s));
          }
        }
      },
    });
  }
}
