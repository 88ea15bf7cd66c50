import { z } from 'zod';
import type { RedisConnection } from '../redis.js';

/**
 * The jobs handed back to wait for a provider quota, by tenant (issue 33: what waits for quota
 * is visible per tenant). One sorted set per prefix, `{prefix}:quota-waits`, on one Redis
 * Cluster slot like the fair hash: member = the waiting job (its tenant, session and id),
 * score = when it tries again (ms). A job that waits again moves its own entry on; one whose
 * time has passed is running or queued again, and is dropped when the set is read or written.
 * Scores are the pods' clocks: a few hundred milliseconds apart only blur the edge of a wait.
 * No expiry: the set empties, and Redis deletes it, once every wait in it has passed.
 */
export const quotaWaitsKey = (prefix: string) => `{${prefix}}:quota-waits`;

/** One entry: what waits, by whom. A JSON array, so no tenant name can break it apart. */
const Member = z.tuple([z.string(), z.string(), z.string()]);

export interface QuotaWait {
  tenant: string;
  sessionId: string;
  jobId: string;
}

/** Per tenant: its jobs waiting for quota now, and the sessions they belong to. */
export interface TenantQuotaWaits {
  jobs: number;
  sessions: Set<string>;
}

export class QuotaWaits {
  private readonly key: string;

  constructor(
    private readonly redis: RedisConnection,
    prefix: string,
    private readonly now: () => number = Date.now,
  ) {
    this.key = quotaWaitsKey(prefix);
  }

  /** `wait`'s job is handed back until `retryAt` (ms). */
  async note(wait: QuotaWait, retryAt: number): Promise<void> {
    const member = JSON.stringify([wait.tenant, wait.sessionId, wait.jobId]);
    await this.redis
      .multi()
      .zremrangebyscore(this.key, '-inf', this.now())
      .zadd(this.key, Math.ceil(retryAt), member)
      .exec();
  }

  /** What waits for quota now, per tenant. */
  async byTenant(): Promise<Map<string, TenantQuotaWaits>> {
    const now = this.now();
    const [, ranged] = (await this.redis
      .multi()
      .zremrangebyscore(this.key, '-inf', now)
      .zrangebyscore(this.key, `(${now}`, '+inf')
      .exec()) ?? [
      [null, 0],
      [null, []],
    ];
    const members = (ranged?.[1] ?? []) as string[];
    const byTenant = new Map<string, TenantQuotaWaits>();
    for (const raw of members) {
      const parsed = Member.safeParse(safeJson(raw));
      if (!parsed.success) continue;
      const [tenant, sessionId] = parsed.data;
      const entry = byTenant.get(tenant) ?? { jobs: 0, sessions: new Set<string>() };
      entry.jobs += 1;
      entry.sessions.add(sessionId);
      byTenant.set(tenant, entry);
    }
    return byTenant;
  }
}

function safeJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}
