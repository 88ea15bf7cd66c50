import type { Logger } from '../../shared/logger.js';
import { pipelineEach } from '../../shared/redis.js';
import { flushOutbox, type QueueSet } from '../../shared/queue-set.js';
import type { SessionStore } from '../../shared/store/session-store.js';
import { startPeriodic } from './periodic.js';

/** Session ids per page of the sweep: one pipelined HLEN each. */
const SWEEP_PAGE = 1000;

/**
 * Drains outboxes that nobody drained: a producer (or a coordinator whose event will not be
 * redelivered) that died between writing a transition and enqueueing its jobs. Adding a job
 * twice is harmless (deterministic ids), so racing a live flush is fine. Every session is
 * looked at, newest first, page by page: an old session's stranded job is as lost as a new one's.
 */
export async function sweepOutboxes(
  store: SessionStore,
  queues: QueueSet,
  options: { pageSize?: number } = {},
): Promise<number> {
  const pageSize = options.pageSize ?? SWEEP_PAGE;
  let flushed = 0;
  for (let offset = 0; ; offset += pageSize) {
    const ids = await store.listSessionIds({ limit: pageSize, offset });
    if (ids.length > 0) flushed += await sweepPage(store, queues, ids);
    if (ids.length < pageSize) return flushed;
  }
}

async function sweepPage(store: SessionStore, queues: QueueSet, ids: string[]): Promise<number> {
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
        logger.warn(
          { flushed },
          'outbox sweep enqueued jobs a coordinator wrote but did not enqueue (it crashed or was stopped in between)',
        );
    },
    { intervalMs, logger },
  );
}
