import type { Job } from 'bullmq';
import { OrqError } from '../shared/errors.js';

/**
 * This pod no longer holds the job it runs: its lock lapsed (the process was paused, or cut off
 * from Redis, for longer than `queues.lockDurationMs`) and BullMQ may have given the job to
 * another pod. What this delivery would do next (start a command, commit, hand its result on)
 * is now the other delivery's to do, so it stops instead (issue 35).
 */
export class DeliveryLostError extends OrqError {
  constructor(queue: string, jobId: string | undefined) {
    super('DELIVERY_LOST', `${queue} job ${jobId ?? '?'} lost its lock: this delivery stops`, {
      hint: 'Nothing to do: BullMQ delivers the job again. A pod paused or cut off from Redis for longer than queues.lockDurationMs loses its jobs',
      details: { queue, jobId },
    });
    this.name = 'DeliveryLostError';
  }
}

/** The reason a job's signal is aborted with when its lock renewal failed (registry.ts). */
export const LOCK_LOST = 'lock lost';

/** Whether `error`, or the abort of the job's `signal`, says the delivery lost its lock. */
export function isDeliveryLost(error: unknown, signal?: AbortSignal): boolean {
  return error instanceof DeliveryLostError || signal?.reason === LOCK_LOST;
}

/**
 * The share of `queues.lockDurationMs` a delivery trusts its lock for without asking Redis: a
 * lock is set for the whole duration, so within half of it the delivery holds it still, with
 * the other half as room for the hand-off that follows the check.
 */
export const LOCK_LEASE_SHARE = 0.5;

/**
 * Per delivery, when its lock was last set, on this process's monotonic clock: a pause of the
 * process moves that clock on, a change of the wall clock does not.
 */
const lockSetAt = new WeakMap<Job, number>();

/**
 * Notes that `job`'s delivery starts now (registry.ts, as its processor is called). BullMQ set
 * its lock after `job.processedOn`, the wall-clock time at which this process asked for the
 * job: the time since then is taken off, so a process paused between the fetch and the
 * processor's start is not trusted for the pause.
 */
export function deliveryStarted(job: Job): void {
  const sinceFetch = Math.max(0, Date.now() - (job.processedOn ?? Date.now()));
  lockSetAt.set(job, performance.now() - sinceFetch);
}

/**
 * Throws DeliveryLostError unless `job` is still this delivery's. Called right before each
 * side effect, not only when the job starts: a delivery can be paused past its lock at any
 * point, and the failed renewal that aborts its signal after such a pause comes too late to
 * stop what the delivery does first on waking. Also throws the reason of an aborted `signal`.
 *
 * Within LOCK_LEASE_SHARE of `lockDurationMs` since its lock was set (deliveryStarted) or last
 * taken again here, the delivery holds the lock still: no other can have it before it lapses,
 * so nothing is asked (a round trip less per hand-off, issue 40). Past that, the lock is taken
 * again for `lockDurationMs`: BullMQ's extendLock succeeds only for the holder of `token`, and
 * a lapsed lock, or one another pod took, fails it.
 */
export async function confirmDelivery(
  job: Job,
  token: string | undefined,
  lockDurationMs: number,
  signal?: AbortSignal,
): Promise<void> {
  if (signal?.reason === LOCK_LOST) throw new DeliveryLostError(job.queueName, job.id);
  signal?.throwIfAborted();
  // No token: a processor called by hand (tests), with no lock to hold.
  if (token === undefined) return;
  const setAt = lockSetAt.get(job);
  const now = performance.now();
  if (setAt !== undefined && now - setAt < lockDurationMs * LOCK_LEASE_SHARE) return;
  if ((await job.extendLock(token, lockDurationMs)) !== 1) {
    throw new DeliveryLostError(job.queueName, job.id);
  }
  // Taken again no earlier than `now`: the lease counts from there.
  if (setAt !== undefined) lockSetAt.set(job, now);
  signal?.throwIfAborted();
}
