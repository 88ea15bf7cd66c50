import { z } from 'zod';
import type { FairRelease } from '../fair-release.js';
import { pipelineEach, type RedisConnection } from '../redis.js';
import { sessionKeys } from './keys.js';
import { QuotaWaits } from './quota-waits.js';
import { TenantSlots } from './tenant-slots.js';

/** What one tenant has in the system now (issue 33: visible per tenant). */
export const TenantLoad = z.object({
  tenant: z.string(),
  /** Its sessions with tasks in flight or waiting. */
  sessions: z.number().int().min(0),
  /** Tasks dispatched and not judged yet: in the work queue, running, or being judged. */
  tasksInFlight: z.number().int().min(0),
  /** Ready tasks held back by their session's scheduling.maxTasksInFlight. */
  tasksWaiting: z.number().int().min(0),
  /**
   * Its jobs (plan, work, judge, replan) handed back to wait for a provider quota; a work job
   * among them is counted in tasksInFlight too.
   */
  jobsWaitingForQuota: z.number().int().min(0),
  /** Its cap (tenants.maxTasksInFlight or tenants.caps), as the workers applied it lately. */
  maxTasksInFlight: z.number().int().min(0).optional(),
  /** With a cap: its work jobs handed back to wait for a slot (counted in tasksInFlight). */
  tasksWaitingForSlot: z.number().int().min(0).optional(),
});
export type TenantLoad = z.infer<typeof TenantLoad>;

/**
 * Per tenant, over the sessions that released work within the fair-release idle time and those
 * with a job waiting for quota: one HGET of the active count and one ZCARD of the ready set per
 * session, one read of the quota waits, and one read of the tenant's cap per tenant. Busiest
 * first.
 */
export async function readTenantLoad(
  redis: RedisConnection,
  prefix: string,
  fair: FairRelease,
): Promise<TenantLoad[]> {
  const [active, quotaWaits] = await Promise.all([
    fair.activeSessions(),
    new QuotaWaits(redis, prefix).byTenant(),
  ]);
  // A session still planning has released no work yet: its quota waits bring it in.
  for (const [tenant, waits] of quotaWaits) {
    for (const sessionId of waits.sessions)
      if (!active.has(sessionId)) active.set(sessionId, tenant);
  }
  const sessions = [...active];
  const replies = await pipelineEach(redis, sessions, (pipeline, [sessionId]) => {
    const keys = sessionKeys(prefix, sessionId);
    pipeline.hget(keys.meta, 'active');
    pipeline.zcard(keys.ready);
  });
  const byTenant = new Map<string, TenantLoad>();
  sessions.forEach(([sessionId, tenant], i) => {
    const inFlight = Number(replies[2 * i]?.[1] ?? 0) || 0;
    const waiting = Number(replies[2 * i + 1]?.[1] ?? 0) || 0;
    const waitsForQuota = quotaWaits.get(tenant)?.sessions.has(sessionId) ?? false;
    if (inFlight + waiting === 0 && !waitsForQuota) return;
    const load = byTenant.get(tenant) ?? {
      tenant,
      sessions: 0,
      tasksInFlight: 0,
      tasksWaiting: 0,
      jobsWaitingForQuota: quotaWaits.get(tenant)?.jobs ?? 0,
    };
    load.sessions += 1;
    load.tasksInFlight += inFlight;
    load.tasksWaiting += waiting;
    byTenant.set(tenant, load);
  });
  const loads = [...byTenant.values()];
  // One script per tenant, on the tenant's own Cluster slot.
  const slots = new TenantSlots(redis, prefix);
  await Promise.all(
    loads.map(async (load) => {
      const capped = await slots.read(load.tenant);
      if (capped.maxTasksInFlight === undefined) return;
      load.maxTasksInFlight = capped.maxTasksInFlight;
      load.tasksWaitingForSlot = capped.waitingForSlot;
    }),
  );
  const busy = (t: TenantLoad) => t.tasksInFlight + t.tasksWaiting + t.jobsWaitingForQuota;
  return loads.sort((a, b) => busy(b) - busy(a) || a.tenant.localeCompare(b.tenant));
}
