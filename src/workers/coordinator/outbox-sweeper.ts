import type { Logger } from '../../shared/logger.js';
import { pipelineEach } from '../../shared/redis.js';
import { flushOutbox, type QueueSet } from '../../shared/queue-set.js';
import type { SessionStore } from '../../shared/store/session-store.js';
import { startPeriodic } from './periodic.js';

/**
 * Drains outboxes that nobody drained: a producer (or a coordinator whose event will not be
 * redelivered) that died between writing a transition and enqueueing its jobs. Adding a job
 * twice is harmless (deterministic ids), so racing a live flush is fine.
 */
export async function sweepOutboxes(
  store: SessionStore,
  queues: QueueSet,
  options: { recentSessions?: number } = {},
): Promise<number> {
  const ids = await store.listSessionIds({ limit: options.recentSessions ?? 1000 });
  if (ids.length === 0) return 0;
  const lengths = await pipelineEach(store.redis, ids, (pipeline, id) =>
    pipeline.hlen(store.keys(id).outbox),
  );
  let flushed = 0;
  for (const [i, id] of ids.entries()) {
    const [error, length] = lengths[i] ?? [null, 0];
    if (!error && Number(length) > 0) flushed += await flushOutbox(store, queues, id);
  }
  return flushed;
}

/** Runs the sweep now and then every `intervalMs` until stopped. */
export function startOutboxSweeper(
  store: SessionStore,
  queues: QueueSet,
  logger: Logger,
  intervalMs: number,
): () => void {
  return startPeriodic(
    'outbox sweep',
    async () => {
      const flushed = await sweepOutboxes(store, queues);
      if (flushed > 0)
        logger.warn({ flushed }, 'outbox sweep enqueued jobs left behind by a crash');
    },
    { intervalMs, logger },
  );
}
