import { createBullBoard } from '@bull-board/api';
import { BullMQAdapter } from '@bull-board/api/bullMQAdapter';
import { FastifyAdapter } from '@bull-board/fastify';
import type { FastifyInstance } from 'fastify';
import type { QueueSet } from '../../../shared/queue-set.js';
import { BOARD_PATH } from '../auth.js';

/** Bull Board at /admin/queues with one adapter per orq queue. */
export async function registerBoard(
  app: FastifyInstance,
  queues: QueueSet,
  options: { readOnly: boolean },
): Promise<void> {
  const serverAdapter = new FastifyAdapter();
  serverAdapter.setBasePath(BOARD_PATH);
  // @bull-board/fastify pins its own copy of @bull-board/api: same shapes, distinct declarations.
  type ServerAdapter = Parameters<typeof createBullBoard>[0]['serverAdapter'];
  createBullBoard({
    queues: queues.all().map(
      (queue) =>
        new BullMQAdapter(queue, {
          readOnlyMode: options.readOnly,
          description: `orq ${queue.name} queue (prefix ${queues.prefix})`,
        }),
    ),
    serverAdapter: serverAdapter as unknown as ServerAdapter,
    options: { uiConfig: { boardTitle: 'orq' } },
  });
  await app.register(serverAdapter.registerPlugin(), { prefix: BOARD_PATH });
}
