import { listedTenant, visibleTo } from '../tenant-scope.js';
import { resumeFor } from '../resume-policy.js';
import type { FastifyInstance } from 'fastify';
import { z } from 'zod';
import { Session } from '../../../shared/domain/session.js';
import { PruneRequest, ResumeRequest, SubmitRequest } from '../../client.js';
import { DeletedSession, PruneReport } from '../../../shared/store/session-retention.js';
import { ApiError } from '../errors.js';
import {
  Accepted,
  CancelRequest,
  HistoryQuery,
  ListQuery,
  SessionParams,
  SessionView,
  StoredHistoryEntry,
} from '../schemas.js';
import { typed, type RouteContext } from './context.js';
import { redactSession } from '../redact.js';

const JSONL = 'application/x-ndjson';
const tags = ['sessions'];

/** True when the caller asked for JSONL by query or by Accept header. */
export function wantsJsonl(format: string | undefined, accept: string | undefined): boolean {
  if (format) return format === 'jsonl';
  return (accept ?? '').split(',').some((part) => part.trim().startsWith(JSONL));
}

/** Create, list, get, cancel, resume and delete sessions, and read their history. */
export function registerSessionRoutes(app: FastifyInstance, ctx: RouteContext): void {
  const api = typed(app);
  const { client, metrics } = ctx;

  api.post(
    '/sessions',
    {
      schema: {
        tags,
        summary: 'Submit an instruction as a new session',
        description:
          'Answers 201 with the new session, or 200 with the existing one when idempotencyKey was used before; 403 when `config` sets a setting the operator does not let callers set (http.sessionOverrides), a provider and model the operator does not offer (its own, or http.models) or a budget over its own; 409 when the key was used for another instruction, config or metadata, or named a session deleted during the submit three times in a row.',
        body: SubmitRequest,
        response: {
          200: Session,
          201: Session,
          400: ApiError,
          403: ApiError,
          409: ApiError,
          503: ApiError,
        },
      },
    },
    async (request, reply) => {
      // Of concurrent first submits with one key, only the one that stored the session is 201.
      const { session, created } = await client.submitWithOutcome(request.body, {
        allowedOverrides: ctx.sessionOverrides,
        offeredModels: ctx.offeredModels,
      });
      metrics.sessionsSubmitted.inc({ outcome: created ? 'created' : 'existing' });
      return reply.code(created ? 201 : 200).send(redactSession(session));
    },
  );

  api.get(
    '/sessions',
    {
      schema: {
        tags,
        summary: 'List sessions, newest first',
        description:
          'A page of `limit` sessions; when there are more, the `Link` header names the next page (rel="next", with its `after` cursor). A tenant\'s key lists its own tenant\'s sessions, in full pages.',
        querystring: ListQuery,
        response: { 200: z.array(Session), 400: ApiError, 403: ApiError, 503: ApiError },
      },
    },
    async (request, reply) => {
      const tenant = listedTenant(request, request.query.tenant);
      const page = await client.listPage({ ...request.query, ...(tenant ? { tenant } : {}) });
      if (page.next) {
        const next = new URLSearchParams({ limit: String(request.query.limit), after: page.next });
        if (request.query.tenant) next.set('tenant', request.query.tenant);
        void reply.header('link', `</sessions?${next.toString()}>; rel="next"`);
      }
      return visibleTo(request, page.sessions).map(redactSession);
    },
  );

  api.get(
    '/sessions/:id',
    {
      schema: {
        tags,
        summary: 'A session with its tasks and open/active counters',
        params: SessionParams,
        response: { 200: SessionView, 400: ApiError, 404: ApiError, 503: ApiError },
      },
    },
    async (request) => {
      const view = await client.get(request.params.id);
      return { ...view, session: redactSession(view.session) };
    },
  );

  api.post(
    '/sessions/:id/cancel',
    {
      schema: {
        tags,
        summary: 'Cancel a session (applied by the coordinator)',
        params: SessionParams,
        body: CancelRequest,
        response: { 202: Accepted, 400: ApiError, 404: ApiError, 409: ApiError, 503: ApiError },
      },
    },
    async (request, reply) => {
      await client.cancel(request.params.id, request.body?.reason);
      metrics.sessionActions.inc({ action: 'cancel' });
      return reply.code(202).send({ sessionId: request.params.id, accepted: true });
    },
  );

  api.delete(
    '/sessions/:id',
    {
      schema: {
        tags,
        summary: 'Delete a finished session and everything kept of it',
        description:
          'Tasks, results, history and usage go with it. A session still planning, running or blocked is refused (409): cancel it first.',
        params: SessionParams,
        response: {
          200: DeletedSession,
          400: ApiError,
          404: ApiError,
          409: ApiError,
          503: ApiError,
        },
      },
    },
    async (request) => {
      const deleted = await client.delete(request.params.id);
      metrics.sessionActions.inc({ action: 'delete' });
      return deleted;
    },
  );

  api.post(
    '/sessions/prune',
    {
      schema: {
        tags,
        summary: 'Delete the finished sessions idle for longer than olderThanSeconds',
        description: 'With dryRun, lists what would be deleted and deletes nothing.',
        body: PruneRequest,
        response: { 200: PruneReport, 400: ApiError, 503: ApiError },
      },
    },
    async (request) => client.prune(request.body),
  );

  api.post(
    '/sessions/:id/resume',
    {
      schema: {
        tags,
        summary:
          'Resume a BLOCKED session (retry or skip its blocked tasks, or continue with a note), or a BUDGET_EXHAUSTED one with a higher budget',
        params: SessionParams,
        body: ResumeRequest.nullish(),
        response: {
          202: Accepted,
          400: ApiError,
          403: ApiError,
          404: ApiError,
          409: ApiError,
          503: ApiError,
        },
      },
    },
    async (request, reply) => {
      const requestId = await resumeFor(client, request, request.params.id, request.body);
      metrics.sessionActions.inc({ action: 'resume' });
      return reply.code(202).send({ sessionId: request.params.id, requestId, accepted: true });
    },
  );

  api.get(
    '/sessions/:id/history',
    {
      schema: {
        tags,
        summary: "The session's history in stream order",
        description:
          "JSON: entries with their stream ids. JSONL (`?format=jsonl` or `Accept: application/x-ndjson`): one entry per line in seed 004's line format.",
        params: SessionParams,
        querystring: HistoryQuery,
        response: {
          200: {
            description: 'History entries',
            content: {
              'application/json': { schema: z.array(StoredHistoryEntry) },
              [JSONL]: { schema: z.string() },
            },
          },
          400: ApiError,
          404: ApiError,
          503: ApiError,
        },
      },
    },
    async (request, reply) => {
      const { id } = request.params;
      const { format, after, limit } = request.query;
      const entries = await client.history(id, {
        ...(after ? { after } : {}),
        ...(limit ? { count: limit } : {}),
      });
      if (wantsJsonl(format, request.headers.accept)) {
        const body = entries.map((e) => JSON.stringify(e.entry)).join('\n');
        return reply.type(`${JSONL}; charset=utf-8`).send(entries.length > 0 ? `${body}\n` : '');
      }
      return reply.type('application/json; charset=utf-8').send(entries);
    },
  );
}
