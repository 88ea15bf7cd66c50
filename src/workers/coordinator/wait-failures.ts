import type { HistoryEntryDraft } from '../../shared/domain/history.js';
import { openWaits, type Session } from '../../shared/domain/session.js';
import { isAnswerEvent, type JobFailedEvent } from '../../shared/queues.js';
import type { Transition } from './context.js';

/**
 * A person's answer, or a wait's timeout, that the coordinator could not apply on any try
 * (issue 48): nothing changed, so the wait is still open. The history says so, loudly, with
 * the answer's event id: the client that sent the answer reports the failure rather than
 * leaving the person to think it will be applied, and a person reading `orq history` sees
 * that they must answer again.
 */
export function waitEventFailed(
  session: Session,
  event: JobFailedEvent & { waitId: string },
  eventId: string,
  errorEntry: HistoryEntryDraft,
): Transition {
  const { waitId } = event;
  // A plan approval is open only while the session waits in AWAITING_APPROVAL.
  const open = openWaits(session).some(
    (w) => w.id === waitId && (w.kind !== 'plan-approval' || session.state === 'AWAITING_APPROVAL'),
  );
  const still = open
    ? `the wait ${waitId} is still open: answer it again (orq status ${session.id} shows it)`
    : `the wait ${waitId} is not open any more: session ${session.id} is ${session.state}`;
  const answer = isAnswerEvent(event.jobId);
  const reason = answer
    ? `an answer to ${waitId} was not applied (${event.error}); ${still}`
    : `the timeout of ${waitId} was not applied (${event.error}); ${open ? `the wait ${waitId} stays open until a person answers it` : still}`;
  return {
    changeset: {
      eventId,
      history: [
        errorEntry,
        {
          type: 'decision',
          decision: answer ? 'wait:answer-failed' : 'wait:timeout-failed',
          reason,
          // The failed event's id: the client that queued the answer waits for it.
          inputs: { waitId, eventId: event.jobId, stillOpen: open },
        },
      ],
    },
  };
}
