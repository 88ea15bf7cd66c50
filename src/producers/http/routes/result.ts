import type { FastifyInstance } from 'fastify';
import { SessionResult } from '../../../shared/domain/result.js';
import { ApiError } from '../errors.js';
import { ResultQuery, SessionParams } from '../schemas.js';
import { typed, type RouteContext } from './context.js';

/** `GET /sessions/:id/result`: what the session produced (client.result). */
export function registerResultRoute(app: FastifyInstance, ctx: RouteContext): void {
  typed(app).get(
    '/sessions/:id/result',
    {
      schema: {
        tags: ['sessions'],
        summary: 'What the session produced: the outputs of its final tasks',
        description:
          "The outputs of the tasks no other task depends on (a replanned task counted as its subtasks), or of every done task with the session's result.tasks setting `done`; `text` joins them. A session that stopped short (BLOCKED, FAILED, CANCELLED, BUDGET_EXHAUSTED) gives what it did, with `notes` saying what is missing and why. One still planning or running answers 409 unless `partial=true`.",
        params: SessionParams,
        querystring: ResultQuery,
        response: {
          200: SessionResult,
          400: ApiError,
          404: ApiError,
          409: ApiError,
          503: ApiError,
        },
      },
    },
    async (request) =>
      ctx.client.result(request.params.id, { partial: request.query.partial === 'true' }),
  );
}
