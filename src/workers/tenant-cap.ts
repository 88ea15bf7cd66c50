import type { Job, Processor } from 'bullmq';
import type { TenantsConfig } from '../shared/config/schema.js';
import { Session } from '../shared/domain/session.js';
import { MustWaitError } from '../shared/errors.js';
import type { Logger } from '../shared/logger.js';
import type { TenantSlots } from '../shared/store/tenant-slots.js';
import { isDeliveryLost } from './delivery.js';

/** How long a job refused a slot waits before it asks again (a slot frees when a task ends). */
export const TENANT_RETRY_MS = 1_000;

/** A work job's tenant is at its cap: the job is handed back to its queue (registry.ts). */
export class TenantWaitError extends MustWaitError {
  constructor(
    readonly tenant: string,
    readonly cap: number,
    waitMs: number,
  ) {
    const activity = `waiting for a tenant slot (${tenant})`;
    super('TENANT_WAIT', activity, waitMs, `${activity}: ${cap} of its tasks run already`, {
      hint: 'The job runs when one of them ends; raise tenants.maxTasksInFlight or tenants.caps.<tenant> to let more run',
      details: { tenant, cap, waitMs },
    });
    this.name = 'TenantWaitError';
  }

  /** Up to half a retry interval of jitter, so a tenant's waiting jobs do not all ask at once. */
  override retryAt(now: number = Date.now()): number {
    return now + this.waitMs + Math.round((Math.random() * TENANT_RETRY_MS) / 2);
  }
}

/** The cap of `tenant`'s work jobs running at once; 0: none. */
export function tenantCap(config: TenantsConfig, tenant: string): number {
  return Object.hasOwn(config.caps, tenant)
    ? (config.caps[tenant]?.maxTasksInFlight ?? 0)
    : config.maxTasksInFlight;
}

/** The tenant of sessions stored without one. */
const DEFAULT_TENANT = Session.shape.tenant.parse(undefined);

/** The tenant a work job is for. Jobs enqueued before they carried it count as the default's. */
function jobTenant(job: Job): string {
  const { tenant } = (job.data ?? {}) as { tenant?: unknown };
  return typeof tenant === 'string' && tenant !== '' ? tenant : DEFAULT_TENANT;
}

/**
 * The worker's processor behind its tenant's cap (issue 33): the job runs only once it holds a
 * slot of its tenant, leased for `leaseMs` and renewed every third of that while it runs, given
 * back when it ends. A full tenant's job throws TenantWaitError before anything ran. With no cap
 * for the tenant, nothing is asked of Redis.
 */
export function withTenantCap(
  processor: Processor,
  slots: TenantSlots,
  config: TenantsConfig,
  leaseMs: number,
  logger: Logger,
): Processor {
  return async (job, token, signal) => {
    const tenant = jobTenant(job);
    const cap = tenantCap(config, tenant);
    if (cap === 0 || !job.id) return processor(job, token, signal);
    const holder = job.id;
    const outcome = await slots.acquire(tenant, cap, holder, leaseMs, TENANT_RETRY_MS);
    if (!outcome.granted) throw new TenantWaitError(tenant, cap, outcome.waitMs);
    const renewal = setInterval(() => {
      slots.renew(tenant, holder, leaseMs).then(
        (held) => {
          if (!held) logger.warn({ tenant, jobId: holder }, 'tenant slot lease lapsed');
        },
        (error: Error) =>
          logger.warn({ tenant, jobId: holder, err: error.message }, 'cannot renew tenant slot'),
      );
    }, leaseMs / 3);
    renewal.unref();
    let lost = false;
    try {
      return await processor(job, token, signal);
    } catch (error) {
      lost = isDeliveryLost(error, signal);
      throw error;
    } finally {
      clearInterval(renewal);
      // A delivery that lost its job leaves the slot, held under the job's id, to the job's
      // new delivery (issue 35). Not given back (Redis away): its lease lapses instead.
      if (!lost) await slots.release(tenant, holder).catch(() => undefined);
    }
  };
}
