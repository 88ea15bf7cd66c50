import type { Job } from 'bullmq';
import { PRIORITY_BAND } from '../shared/fair-release.js';
import type { ProviderQuotas } from './llm/quota.js';
import type { QuotaCaller } from './llm/quota-caller.js';
import type { Logger } from '../shared/logger.js';
import { jobKind, type Role } from '../shared/queues.js';

/**
 * A role job as the quota line sees its calls (issue 46, quota-line.ts): from what the job
 * carries. Its session's tenant and priority are filled in when the role reads the session
 * (ModelResolver); until then a fair-released job's band comes from its BullMQ number.
 */
export function quotaCallerOf(role: Role, job: Job): QuotaCaller {
  const data = (job.data ?? {}) as {
    sessionId?: unknown;
    tenant?: unknown;
    criticalPath?: unknown;
  };
  const number = job.opts.priority;
  return {
    jobId: job.id ?? '',
    sessionId: typeof data.sessionId === 'string' ? data.sessionId : '',
    tenant: typeof data.tenant === 'string' ? data.tenant : undefined,
    // bandPriority: band (9 - priority) × PRIORITY_BAND + 1 and up.
    priority: number ? 9 - Math.floor((number - 1) / PRIORITY_BAND) : undefined,
    step: role === 'planner' || role === 'replanner' || jobKind(job.name) === 'judge-plan',
    criticalPath: typeof data.criticalPath === 'number' ? data.criticalPath : undefined,
    lanes: new Set(),
    joined: new Set(),
  };
}

/** Whether the job was last handed back to wait for a quota (its progress says so). */
export function waitedForQuota(job: Job): boolean {
  const progress = job.progress as { activity?: unknown } | undefined;
  return (
    typeof progress?.activity === 'string' && progress.activity.startsWith('waiting for quota')
  );
}

/**
 * The job ended without being handed back: a place one of its calls held in a line, in this run
 * or before a hand-back (a session cancelled while its job waited), is given up now, not when
 * its lease lapses. Costs nothing for a job that never waited.
 */
export async function leaveQuotaLines(
  quotas: ProviderQuotas,
  job: Job,
  caller: QuotaCaller,
  logger: Logger,
): Promise<void> {
  if (!job.id || (caller.joined.size === 0 && !waitedForQuota(job))) return;
  try {
    await quotas.leaveLines(job.id);
  } catch (cause) {
    logger.debug({ err: (cause as Error).message }, 'quota line not left; its lease lapses');
  }
}
