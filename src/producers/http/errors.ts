import type { FastifyError, FastifyInstance, FastifyReply } from 'fastify';
import { hasZodFastifySchemaValidationErrors } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { SessionId } from '../../shared/domain/session.js';
import type { RouteMethods } from './allowed-methods.js';
import { OrqError, ValidationError, type FieldIssue } from '../../shared/errors.js';
import type { Logger } from '../../shared/logger.js';
import { asRedisUnavailable } from '../../shared/redis.js';

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
  REDIS_UNAVAILABLE: 503,
};

/** The orq code, and what to do, for the client errors Fastify raises itself. */
const FASTIFY_CLIENT_ERRORS: Partial<Record<number, { error: string; hint?: string }>> = {
  400: {
    error: 'VALIDATION_FAILED',
    hint: 'Send a JSON body with Content-Type: application/json.',
  },
  413: { error: 'PAYLOAD_TOO_LARGE', hint: 'Request bodies are limited to 1 MiB.' },
  414: {
    error: 'URI_TOO_LONG',
    hint: `Session ids have at most ${SessionId.maxLength} characters.`,
  },
  415: { error: 'UNSUPPORTED_MEDIA_TYPE', hint: 'Send JSON with Content-Type: application/json.' },
};

type SchemaIssue = {
  instancePath: string;
  message?: string;
  keyword: string;
  params: Record<string, unknown>;
};

/** Fastify's zod validation errors → `{path, message}` pairs naming the field, like the client's. */
export function issuesFromSchemaValidation(validation: readonly SchemaIssue[]): FieldIssue[] {
  return validation.map((issue) => {
    const segments = issue.instancePath.split('/').filter(Boolean);
    let message = issue.message ?? 'invalid';
    if (issue.keyword === 'unrecognized_keys' && Array.isArray(issue.params.keys)) {
      const keys = (issue.params.keys as string[]).map((k) => [...segments, k].join('.'));
      message = `unknown key${keys.length > 1 ? 's' : ''} ${keys.map((k) => `"${k}"`).join(', ')}`;
    }
    return { path: segments.join('.') || '(root)', message };
  });
}

/** Maps an error thrown by a route to an HTTP status and an ApiError body. */
export function toApiError(error: unknown): { status: number; body: ApiError } {
  if (hasZodFastifySchemaValidationErrors(error)) {
    const issues = issuesFromSchemaValidation(error.validation as unknown as SchemaIssue[]);
    const where = (error as { validationContext?: string }).validationContext ?? 'request';
    return {
      status: 400,
      body: {
        error: 'VALIDATION_FAILED',
        message: `Invalid ${where}: ${issues.map((i) => `${i.path}: ${i.message}`).join('; ')}`,
        issues,
      },
    };
  }
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

/** A request URL without its query string. */
const pathOf = (url: string): string => url.split('?')[0] ?? '/';

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
    if (status === 503) logger.warn({ ...where, err: body.message }, 'answered 503');
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
