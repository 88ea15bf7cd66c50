import type { Logger } from '../../shared/logger.js';
import type { RoleMetrics } from '../metrics.js';
import type { Changeset, SessionStore } from '../../shared/store/session-store.js';
import type { HistoryEntryDraft } from '../../shared/domain/history.js';

export interface CoordinatorContext {
  store: SessionStore;
  logger: Logger;
  /** Counts applied decisions by kind, when the pod serves metrics. */
  metrics?: Pick<RoleMetrics, 'countDecision'>;
}

/**
 * What a handler concluded: a changeset to apply, or why the event changes nothing. `applied`
 * runs once the changeset is written (status OK), for clean-up the write makes safe.
 */
export type Transition =
  { changeset: Changeset; applied?: () => Promise<void> } | { ignore: string; eventId: string };

export const ignore = (eventId: string, reason: string): Transition => ({
  ignore: reason,
  eventId,
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
