import type { Logger } from '../../shared/logger.js';
import { pruneSessions } from '../../shared/store/session-retention.js';
import type { SessionStore } from '../../shared/store/session-store.js';
import { startPeriodic } from './periodic.js';

/**
 * `retention.deleteFinishedAfterSeconds`: coordinator pods delete the finished sessions idle for
 * longer than that, now and every `intervalMs`. Several pods may sweep at once: a session is
 * deleted once, and the others find it gone.
 */
export function startRetentionSweeper(
  store: SessionStore,
  logger: Logger,
  options: { maxIdleSeconds: number; intervalMs: number },
): () => void {
  return startPeriodic(
    'retention sweep',
    async () => {
      const report = await pruneSessions(store, {
        cutoffMs: Date.now() - options.maxIdleSeconds * 1000,
      });
      if (report.deleted.length > 0 || report.unindexed > 0) {
        logger.info(
          { deleted: report.deleted.length, unindexed: report.unindexed },
          'retention deleted finished sessions',
        );
      }
    },
    { intervalMs: options.intervalMs, logger },
  );
}
