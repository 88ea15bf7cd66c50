import { createBullBoard } from '@bull-board/api';
import { BullMQAdapter } from '@bull-board/api/bullMQAdapter';
import { FastifyAdapter } from '@bull-board/fastify';
import type { FastifyInstance, FastifyReply } from 'fastify';
import { OrqError } from '../../../shared/errors.js';
import type { QueueSet } from '../../../shared/queue-set.js';
import { asRedisUnavailable } from '../../../shared/redis.js';
import { BOARD_PATH } from '../auth.js';
import { toApiError } from '../errors.js';
import { UI_PATH } from '../ui/html.js';
import { viewPathOfJob } from '../ui/links.js';

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

/**
 * Bull Board at /admin/queues with one adapter per orq queue, linked to the session view.
 * `readOnly` hides its actions; board-guard.ts refuses the calls themselves, whatever the UI
 * offers.
 */
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
    queues: queues.all().map((queue) => {
      const adapter = new BullMQAdapter(queue, {
        // The UI shows retry and clean only where they can work; board-guard.ts decides.
        readOnlyMode: options.readOnly,
        allowRetries: !options.readOnly,
        description: `orq ${queue.name} queue (prefix ${queues.prefix})`,
        // From a job to its task (or session) in the session view: a link in the job's header.
        externalJobUrl: (job) => {
          const href = viewPathOfJob(job.data);
          if (!href) return { href: UI_PATH, displayText: 'orq sessions' };
          return { href, displayText: href.includes('/tasks/') ? 'task in orq' : 'session in orq' };
        },
      });
      return adapter;
    }),
    serverAdapter: serverAdapter as unknown as ServerAdapter,
    options: {
      uiConfig: { boardTitle: 'orq', miscLinks: [{ text: 'orq sessions', url: UI_PATH }] },
    },
  });
  await app.register(
    async (scope) => {
      scope.addHook('onSend', async (_request, reply, payload) => withoutWebFonts(reply, payload));
      await scope.register(serverAdapter.registerPlugin());
    },
    { prefix: BOARD_PATH },
  );
}

const WEB_FONTS = /<link[^>]+href="https:\/\/fonts\.googleapis\.com\/[^>]*>\s*/g;

/**
 * Bull Board's page loads its fonts from Google: a request to a CDN that the page's
 * Content-Security-Policy refuses (a console error) and that an offline deployment cannot make.
 * Without it the board falls back to the system's sans-serif fonts.
 */
function withoutWebFonts(reply: FastifyReply, payload: unknown): unknown {
  const type = String(reply.getHeader('content-type') ?? '');
  if (typeof payload !== 'string' || !type.startsWith('text/html')) return payload;
  return payload.replace(WEB_FONTS, '');
}
