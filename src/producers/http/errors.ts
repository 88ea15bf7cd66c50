import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { z } from 'zod';
import { SessionId } from '../../shared/domain/session.js';
import type { RouteMethods } from './allowed-methods.js';
import { OrqError, ValidationError } from '../../shared/errors.js';
import type { Logger } from '../../shared/logger.js';
import { asRedisUnavailable } from '../../shared/redis.js';
import { BODY_LIMIT_BYTES } from './unread-body.js';

/** The body of every error answer. */
export const ApiError = z.object({
  /** A stable code: VALIDATION_FAILED, NOT_FOUND, INVALID_STATE, REDIS_UNAVAILABLE, ... */
  error: z.string(),
  message: z.string(),
  hint: z.string().optional(),
  issues: z.array(z.object({ path: z.string(), message: z.string() })).optional(),
});
export type ApiError = z.infer<typeof ApiError>;

const STATUS_BY_CODE: Partial<Record<string, number>> = {
  VALIDATION_FAILED: 400,
  CONFIG_INVALID: 400,
  FORBIDDEN: 403,
  NOT_FOUND: 404,
  INVALID_STATE: 409,
  CONFLICT: 409,
  WAIT_ENDED: 409,
  // An answer to a question of a session its budget stopped: raise the budget first.
  BUDGET_EXHAUSTED: 409,
  TOO_MANY_REQUESTS: 429,
  REDIS_UNAVAILABLE: 503,
};

/** The orq code, and what to do, for the client errors Fastify raises itself. */
const FASTIFY_CLIENT_ERRORS: Partial<Record<number, { error: string; hint?: string }>> = {
  400: {
    error: 'VALIDATION_FAILED',
    hint: 'Send a JSON body with Content-Type: application/json.',
  },
  413: {
    error: 'PAYLOAD_TOO_LARGE',
    hint: `Request bodies are limited to ${BODY_LIMIT_BYTES / 1024 / 1024} MiB; an instruction to 100,000 characters.`,
  },
  415: { error: 'UNSUPPORTED_MEDIA_TYPE', hint: 'Send JSON with Content-Type: application/json.' },
};

/** Maps an error thrown by a route to an HTTP status and an ApiError body. */
export function toApiError(error: unknown): { status: number; body: ApiError } {
  const typed = asRedisUnavailable(error);
  if (typed instanceof OrqError) {
    return {
      status: STATUS_BY_CODE[typed.code] ?? 500,
      body: {
        error: typed.code,
        // The hint has a field of its own: not repeated in the message.
        message: typed.summary,
        ...(typed.hint ? { hint: typed.hint } : {}),
        ...(typed instanceof ValidationError ? { issues: typed.issues } : {}),
      },
    };
  }
  // Fastify's own client errors (bad JSON, wrong content type, body too large) keep their
  // status, under orq's codes rather than Fastify's internal FST_ERR_* names.
  const statusCode = (error as FastifyError | undefined)?.statusCode;
  if (statusCode !== undefined && statusCode >= 400 && statusCode < 500) {
    const fastify = FASTIFY_CLIENT_ERRORS[statusCode];
    return {
      status: statusCode,
      body: {
        error: fastify?.error ?? 'BAD_REQUEST',
        message: (error as FastifyError).message,
        ...(fastify?.hint ? { hint: fastify.hint } : {}),
      },
    };
  }
  return {
    status: 500,
    body: { error: 'INTERNAL', message: 'internal error; see the server log' },
  };
}

/** The text of the error under an orq error (ioredis's own), or of the error itself. */
function rawCause(error: unknown): string {
  const under = error instanceof Error && error.cause !== undefined ? error.cause : error;
  return under instanceof Error ? under.message : String(under);
}

/** A request URL without its query string. */
const pathOf = (url: string): string => url.split('?')[0] ?? '/';

/** The longest path parameter the router takes (a session id, a job id on Bull Board's pages). */
export const MAX_PATH_PARAM_LENGTH = 512;

/** A path as an error message quotes it: a 16 KiB one would drown what the message says. */
const quotePath = (path: string): string =>
  JSON.stringify(path.length > 80 ? `${path.slice(0, 80)}…` : path);

/**
 * Maps the errors Fastify's router raises before any route, hook or error handler runs (its
 * `frameworkErrors`): a URL that does not decode, a path parameter over maxParamLength.
 */
export function toApiFrameworkError(
  error: FastifyError,
  url: string,
): { status: number; body: ApiError } {
  const path = pathOf(url);
  switch (error.code) {
    case 'FST_ERR_BAD_URL':
      return {
        status: 400,
        body: {
          error: 'VALIDATION_FAILED',
          message: `${quotePath(path)} is not a valid URL path`,
          hint: 'Percent-encode the path (e.g. with encodeURIComponent): each % takes two hex digits, and the bytes must be UTF-8.',
        },
      };
    // 400 rather than Fastify's 414: the URI is not too long for the server (RFC 9110 §15.5.15),
    // one segment is too long to be a session id, the same refusal as an id with a bad character.
    case 'FST_ERR_MAX_PARAM_LENGTH':
      return {
        status: 400,
        body: {
          error: 'VALIDATION_FAILED',
          message: `${quotePath(path)} has a path parameter longer than ${MAX_PATH_PARAM_LENGTH} characters`,
          hint: `Session ids have at most ${SessionId.maxLength} characters (letters, digits, _ and -).`,
        },
      };
    default:
      return toApiError(error);
  }
}

/**
 * Fastify's `frameworkErrors` option: without it the router answers these itself, in Fastify's
 * body (`FST_ERR_*`, statusCode), bypassing setErrorHandler.
 */
export function frameworkErrorHandler(logger: Logger) {
  return (error: FastifyError, request: FastifyRequest, reply: FastifyReply): FastifyReply => {
    const { status, body } = toApiFrameworkError(error, request.url);
    if (status >= 500) logger.error({ method: request.method, err: error }, body.message);
    return reply.code(status).send(body);
  };
}

export function installErrorHandler(
  app: FastifyInstance,
  logger: Logger,
  routes: RouteMethods = { allowed: () => [], literal: () => [] },
): void {
  const methodNotAllowed = (reply: FastifyReply, method: string, path: string, allowed: string[]) =>
    reply
      .code(405)
      .header('allow', allowed.join(', '))
      .send({
        error: 'METHOD_NOT_ALLOWED',
        message: `${path} does not take ${method}`,
        hint: `Use ${allowed.join(', ')}.`,
      });
  app.setErrorHandler((error, request, reply) => {
    const { status, body } = toApiError(error);
    const path = pathOf(request.url);
    // GET /sessions/prune reaches GET /sessions/:id, which finds no session "prune": the path is
    // POST /sessions/prune's, so the answer is that route's 405, not "no such session".
    const literal = routes.literal(path);
    if (status === 404 && request.routeOptions.url?.includes(':') && literal.length > 0) {
      return methodNotAllowed(reply, request.method, path, literal);
    }
    const where = { method: request.method, route: request.routeOptions.url };
    // The answer says it in words; the log keeps what ioredis said, for whoever looks into it.
    if (status === 503)
      logger.warn({ ...where, err: body.message, cause: rawCause(error) }, 'answered 503');
    else if (status >= 500) logger.error({ ...where, err: error }, body.message);
    return reply.code(status).send(body);
  });
  app.setNotFoundHandler((request, reply) => {
    const path = pathOf(request.url);
    const allowed = routes.allowed(path);
    if (allowed.length > 0) return methodNotAllowed(reply, request.method, path, allowed);
    return reply
      .code(404)
      .send({ error: 'NOT_FOUND', message: `no route ${request.method} ${path}` });
  });
}
