import { jobIds, outboxJob, type OutboxJob } from '../../shared/queues.js';

/**
 * The delayed event that ends a wait nobody answered (approval.timeoutSeconds for a plan,
 * approval.stepTimeoutSeconds for a running execution's): queued through the outbox of the write
 * that opens the wait, so the wait and its timer exist together or not at all. One per wait: its
 * job id names the wait.
 */
export function waitTimerJob(sessionId: string, waitId: string, notBefore: number): OutboxJob {
  return {
    ...outboxJob('coordinator', 'wait-timed-out', jobIds.waitTimedOut(sessionId, waitId), {
      sessionId,
      waitId,
    }),
    notBefore,
  };
}
