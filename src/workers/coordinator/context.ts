import type { Logger } from '../../shared/logger.js';
import type { RoleMetrics } from '../metrics.js';
import type { Changeset } from '../../shared/store/session-records.js';
import type { SessionStore } from '../../shared/store/session-store.js';
import type { HistoryEntryDraft } from '../../shared/domain/history.js';
import type { Session } from '../../shared/domain/session.js';
import { inBand } from '../../shared/fair-release.js';
import { jobIds, outboxJob, type OutboxJob, type PlanJob } from '../../shared/queues.js';

export interface CoordinatorContext {
  store: SessionStore;
  logger: Logger;
  /** Counts applied decisions by kind, when the pod serves metrics. */
  metrics?: Pick<RoleMetrics, 'countDecision'>;
}

/**
 * What a handler concluded: a changeset to apply, or why the event changes nothing. `applied`
 * runs once the changeset is written (status OK), for clean-up the write makes safe. An ignored
 * event is recorded in the history (event:ignored) unless `quiet`: an event that was due to
 * change nothing, as a timer whose wait ended before it, is only logged.
 */
export type Transition =
  | { changeset: Changeset; applied?: () => Promise<void> }
  | { ignore: string; eventId: string; quiet?: true };

export const ignore = (eventId: string, reason: string): Transition => ({
  ignore: reason,
  eventId,
});

/** An event that changes nothing and is no news: logged at debug, not written to the history. */
export const ignoreQuietly = (eventId: string, reason: string): Transition => ({
  ignore: reason,
  eventId,
  quiet: true,
});

/**
 * A failure that changes no state is still written down: the error with its reason, and why
 * nothing else happened (DESIGN.md: every failure is visible in the session history).
 */
export function recordOnly(
  eventId: string,
  errorEntry: HistoryEntryDraft,
  reason: string,
): Transition {
  return {
    changeset: {
      eventId,
      history: [
        errorEntry,
        {
          type: 'decision',
          decision: 'event:ignored',
          reason: `job-failed: ${reason}`,
          inputs: {},
        },
      ],
    },
  };
}

/**
 * The Planner's job for `attempt` of the session's plan, in the session's band: after a replan
 * decision, an interrupted attempt, or a person's rejection.
 */
export function planJob(
  session: Session,
  attempt: number,
  feedback?: PlanJob['feedback'],
): OutboxJob {
  return inBand(
    session,
    outboxJob('plan', 'plan', jobIds.plan(session.id, attempt), {
      sessionId: session.id,
      attempt,
      ...(feedback ? { feedback } : {}),
    }),
  );
}
