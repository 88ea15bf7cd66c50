import type { Logger } from '../../shared/logger.js';
import type { RoleMetrics } from '../metrics.js';
import type { Changeset, SessionStore } from '../../shared/store/session-store.js';

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
