import type { ServerResponse } from 'node:http';
import type { FastifyInstance } from 'fastify';
import { z } from 'zod';
import { FINISHED_SESSION_STATES } from '../../../shared/domain/session.js';
import type { StoredHistoryEntry } from '../../../shared/store/session-records.js';
import { toApiError, ApiError } from '../errors.js';
import { EventsQuery, SessionParams, StreamId } from '../schemas.js';
import { formatSseEvent, SSE_HEARTBEAT } from '../sse.js';
import { typed, type RouteContext } from './context.js';
import { UI_PATH } from '../ui/html.js';
import { callerOf } from '../auth.js';

const HEARTBEAT_MS = 15_000;

/** Writes and waits for the socket to drain, so a slow reader does not grow our buffers. */
async function write(res: ServerResponse, chunk: string, signal: AbortSignal): Promise<void> {
  if (res.writableEnded || signal.aborted) return;
  if (res.write(chunk)) return;
  await new Promise<void>((resolve) => {
    const done = () => {
      res.off('drain', done);
      res.off('close', done);
      resolve();
    };
    res.once('drain', done);
    res.once('close', done);
  });
}

const REPLAY_PAGE = 500;

/** The stored history after `after`, page by page. */
async function* replay(
  ctx: RouteContext,
  sessionId: string,
  after: string | undefined,
): AsyncGenerator<StoredHistoryEntry> {
  let cursor = after;
  for (;;) {
    const page = await ctx.client.history(sessionId, {
      ...(cursor ? { after: cursor } : {}),
      count: REPLAY_PAGE,
    });
    yield* page;
    if (page.length < REPLAY_PAGE) return;
    cursor = page.at(-1)!.id;
  }
}

/**
 * `GET /sessions/:id/events`: the session's history entries as server-sent events, in stream
 * order, each with `id:` = its stream id so a reconnecting EventSource resumes after the last one
 * it saw (Last-Event-ID). A final `end` event carries the session's state; the stream then closes.
 */
export function registerEventRoutes(app: FastifyInstance, ctx: RouteContext): void {
  // The session view's script opens the same stream under /ui, where the browser's cookie is
  // accepted (EventSource sends no bearer header); it is left out of the API reference.
  for (const path of ['/sessions/:id/events', `${UI_PATH}/sessions/:id/events`]) {
    registerEventRoute(app, ctx, path, path.startsWith(UI_PATH));
  }
}

function registerEventRoute(
  app: FastifyInstance,
  ctx: RouteContext,
  path: string,
  hide: boolean,
): void {
  typed(app).get(
    path,
    {
      schema: {
        hide,
        tags: ['sessions'],
        summary: "Server-sent events of the session's history until it finishes",
        description:
          'Each event: `id` = stream id, `data` = one history entry (JSON). The last event is `event: end` with `{ sessionId, state }`. Send `Last-Event-ID` (or `?after=`) to resume after an id.',
        params: SessionParams,
        querystring: EventsQuery,
        // Loose: a strict or stripping schema would drop the other headers from request.headers.
        headers: z.looseObject({ 'last-event-id': StreamId.optional() }),
        response: {
          200: {
            description: 'text/event-stream',
            content: { 'text/event-stream': { schema: z.string() } },
          },
          400: ApiError,
          404: ApiError,
          429: ApiError,
          503: ApiError,
        },
      },
    },
    async (request, reply) => {
      const { id } = request.params;
      const after = request.headers['last-event-id'] ?? request.query.after;
      // Answer 404/503 as JSON before the stream starts; after that errors become an `error` event.
      const { session: atStart } = await ctx.client.store.requireSession(id);
      // A session stopped by its budget with a resume not applied yet is about to go on.
      const finished =
        FINISHED_SESSION_STATES.includes(atStart.state) && !(await ctx.client.requestPending(id));
      // Each stream holds a Redis connection: one caller may hold only so many (a 429 here).
      const release = ctx.streamSlots.take(callerOf(request));
      // Given back however the stream ends, a failure before its loop included (idempotent).
      reply.raw.once('close', release);

      reply.hijack();
      const res = reply.raw;
      res.writeHead(200, {
        'content-type': 'text/event-stream; charset=utf-8',
        'cache-control': 'no-cache, no-transform',
        connection: 'keep-alive',
        'x-accel-buffering': 'no',
      });
      const controller = new AbortController();
      const { signal } = controller;
      ctx.streams.add(controller);
      ctx.metrics.sseClients.inc();
      res.on('close', () => controller.abort());
      // Server shutdown aborts every stream: end the response now, not after the pending read.
      signal.addEventListener('abort', () => {
        if (!res.writableEnded) res.end();
      });
      const heartbeat = setInterval(() => void write(res, SSE_HEARTBEAT, signal), HEARTBEAT_MS);
      const log = ctx.logger.child({ sessionId: id });
      try {
        await write(res, 'retry: 3000\n\n', signal);
        // A finished session's history is complete: read it at once instead of a blocking watch.
        const entries = finished
          ? replay(ctx, id, after)
          : ctx.client.watch(id, { ...(after ? { after } : {}), signal, blockMs: 1_000 });
        for await (const stored of entries) {
          if (signal.aborted) break;
          await write(
            res,
            formatSseEvent({ id: stored.id, data: JSON.stringify(stored.entry) }),
            signal,
          );
        }
        if (!signal.aborted) {
          const { session } = await ctx.client.store.requireSession(id);
          await write(
            res,
            formatSseEvent({
              event: 'end',
              data: JSON.stringify({ sessionId: id, state: session.state }),
            }),
            signal,
          );
        }
      } catch (error) {
        const { body } = toApiError(error);
        // The client gets the public message; the log gets the cause behind an INTERNAL one.
        log.warn(
          { err: error instanceof Error ? error.message : String(error) },
          'event stream failed',
        );
        await write(res, formatSseEvent({ event: 'error', data: JSON.stringify(body) }), signal);
      } finally {
        clearInterval(heartbeat);
        release();
        ctx.streams.delete(controller);
        ctx.metrics.sseClients.dec();
        if (!res.writableEnded) res.end();
      }
    },
  );
}
