import { createBullBoard } from '@bull-board/api';
import { BullMQAdapter } from '@bull-board/api/bullMQAdapter';
import { FastifyAdapter } from '@bull-board/fastify';
import type { FastifyInstance } from 'fastify';
import { OrqError } from '../../../shared/errors.js';
import type { QueueSet } from '../../../shared/queue-set.js';
import { asRedisUnavailable } from '../../../shared/redis.js';
import { BOARD_PATH } from '../auth.js';
import { toApiError } from '../errors.js';

type BoardErrorHandler = Parameters<FastifyAdapter['setErrorHandler']>[0];
type BoardStatus = NonNullable<ReturnType<BoardErrorHandler>['status']>;

/**
 * Bull Board's API answers a lost Redis with its own 500 `{error: {key}}`; the rest of the API
 * answers 503 REDIS_UNAVAILABLE, and so does the board's API here. Other errors keep the board's
 * answer, which its UI translates. The UI shows a string `error` as it is.
 */
class OrqBoardAdapter extends FastifyAdapter {
  override setErrorHandler(handler: BoardErrorHandler): this {
    return super.setErrorHandler((error) => {
      const typed = asRedisUnavailable(error);
      if (typed instanceof OrqError && typed.code === 'REDIS_UNAVAILABLE') {
        // Bull Board's type lists only the statuses it answers itself; its Fastify adapter hands
        // any status to reply.status (the test with Redis down checks the 503 arrives).
        const { status, body } = toApiError(typed);
        return { status: status as BoardStatus, body };
      }
      return handler(error);
    });
  }
}

/** Bull Board at /admin/queues with one adapter per orq queue. */
export async function registerBoard(
  app: FastifyInstance,
  queues: QueueSet,
  options: { readOnly: boolean },
): Promise<void> {
  const serverAdapter = new OrqBoardAdapter();
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
