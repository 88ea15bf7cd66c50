import type { HumanWait } from '../../shared/domain/human-wait.js';
import type { Session } from '../../shared/domain/session.js';
import { jobIds, outboxJob, type OutboxJob } from '../../shared/queues.js';

/**
 * The notification of a wait opening or closing, for notifications.webhook (webhook.ts). It is
 * queued whatever the pods' config: the coordinator that takes it posts it, or drops it when
 * no webhook is configured, so the transition stays a function of the session alone.
 */
export function notifyJob(
  session: Session,
  wait: HumanWait,
  event: 'wait.opened' | 'wait.closed',
  state: Session['state'],
  outcome?: string,
): OutboxJob {
  return outboxJob('coordinator', 'notify', jobIds.notify(session.id, wait.id, event), {
    sessionId: session.id,
    event,
    waitId: wait.id,
    kind: wait.kind,
    state,
    at: new Date().toISOString(),
    attempt: 1,
    ...(outcome ? { outcome } : {}),
  });
}
