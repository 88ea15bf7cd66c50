import { readFileSync } from 'node:fs';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { z } from 'zod';
import { OrqError } from '../../../shared/errors.js';
import { SessionState } from '../../../shared/domain/session.js';
import { TaskId } from '../../../shared/domain/task.js';
import { ResumeRequest } from '../../client.js';
import { Accepted, CancelRequest, SessionParams } from '../schemas.js';
import { ApiError, toApiError } from '../errors.js';
import { html, page, UI_PATH, type Html } from '../ui/html.js';
import { sessionsBody } from '../ui/sessions-page.js';
import { sessionBody } from '../ui/session-page.js';
import { taskBody } from '../ui/task-page.js';
import { typed, type RouteContext } from './context.js';
import { resumeFor } from '../resume-policy.js';

/** Sessions shown on the list page, newest first. */
const LIST_LIMIT = 100;
/** The live script asks for the page's content only, to swap it in place. */
const FRAGMENT_HEADER = 'x-orq-fragment';

/** The script and stylesheet, read once from the files shipped beside this module. */
const ASSETS: Record<string, { file: string; type: string }> = {
  'ui.js': { file: 'ui.js', type: 'text/javascript; charset=utf-8' },
  'ui.css': { file: 'ui.css', type: 'text/css; charset=utf-8' },
};
const assetText = new Map<string, string>();
function asset(name: string): string {
  let text = assetText.get(name);
  if (text === undefined) {
    text = readFileSync(new URL(`../ui/assets/${ASSETS[name]!.file}`, import.meta.url), 'utf8');
    assetText.set(name, text);
  }
  return text;
}

interface Rendered {
  title: string;
  body: Html;
  /** What keeps the page current: an event stream's path, or 'poll'. */
  live: string;
}

/**
 * Sends a page (or only its content, for the live script). A refusal the person can act on (an
 * unknown session or task, a bad filter) becomes a page with the message and its hint; a server
 * fault goes on to the error handler, which logs it.
 */
async function sendPage(
  request: FastifyRequest,
  reply: FastifyReply,
  render: () => Promise<Rendered>,
): Promise<FastifyReply> {
  const fragment = request.headers[FRAGMENT_HEADER] === '1';
  reply.type('text/html; charset=utf-8').header('cache-control', 'no-store');
  try {
    const { title, body, live } = await render();
    return reply.send(fragment ? body.text : page(title, body, { live }));
  } catch (error) {
    const { status, body } = toApiError(error);
    if (status >= 500) throw error;
    const content = html`<h1>${body.message}</h1>
      ${body.hint ? html`<p>${body.hint}</p>` : ''}
      <p><a href="${UI_PATH}">All sessions</a></p>`;
    return reply.code(status).send(fragment ? content.text : page(body.error, content));
  }
}

const hidden = { hide: true } as const;

/**
 * The session's history, and the event stream its page follows: from after the last entry the
 * page shows, so opening a long session does not replay its whole history to the browser.
 */
async function historyAndStream(client: RouteContext['client'], id: string) {
  const stored = await client.history(id);
  const last = stored.at(-1)?.id;
  const stream = `${UI_PATH}/sessions/${id}/events${last ? `?after=${encodeURIComponent(last)}` : ''}`;
  return { history: stored.map((h) => h.entry), stream };
}

/** Undefined for a refusal (a session deleted meanwhile, no result to give); faults go on. */
function refusedAsUndefined(error: unknown): undefined {
  if (toApiError(error).status < 500) return undefined;
  throw error;
}

/**
 * The session view at /ui: server-rendered pages over the client (sessions, a session with its
 * task graph and plan story, a task), swapped in place by a small script when the session's
 * event stream says something happened. Actions post JSON with the browser pages' cookie; in
 * read-only mode they are refused (403) and not shown.
 */
export function registerUiRoutes(
  app: FastifyInstance,
  ctx: RouteContext,
  options: { readOnly: boolean },
): void {
  const api = typed(app);
  const { client } = ctx;

  api.get(
    `${UI_PATH}/assets/:name`,
    { schema: { ...hidden, params: z.object({ name: z.enum(['ui.js', 'ui.css']) }) } },
    async (request, reply) =>
      reply
        .type(ASSETS[request.params.name]!.type)
        .header('cache-control', 'no-cache')
        .send(asset(request.params.name)),
  );

  api.get(
    UI_PATH,
    {
      schema: {
        ...hidden,
        querystring: z.object({
          state: z.union([SessionState, z.literal('')]).optional(),
        }),
      },
    },
    async (request, reply) =>
      sendPage(request, reply, async () => {
        const sessions = await client.list({ limit: LIST_LIMIT });
        const rows = await Promise.all(
          sessions.map(async (session) => {
            const view = await client.get(session.id).catch(refusedAsUndefined);
            return view && { session, tasks: view.tasks, usage: view.usage };
          }),
        );
        const filter = request.query.state || undefined;
        const body = sessionsBody(
          rows.filter((r) => r !== undefined),
          filter,
          Date.now(),
        );
        return { title: 'Sessions', body, live: 'poll' };
      }),
  );

  api.get(
    `${UI_PATH}/sessions/:id`,
    { schema: { ...hidden, params: SessionParams } },
    async (request, reply) =>
      sendPage(request, reply, async () => {
        const { id } = request.params;
        const view = await client.get(id);
        const { history, stream } = await historyAndStream(client, id);
        const result = await client.result(id, { partial: true }).catch(refusedAsUndefined);
        const body = sessionBody({
          session: view.session,
          tasks: view.tasks,
          usage: view.usage,
          history,
          result,
          readOnly: options.readOnly,
          now: Date.now(),
        });
        return { title: `Session ${id}`, body, live: stream };
      }),
  );

  api.get(
    `${UI_PATH}/sessions/:id/tasks/:taskId`,
    { schema: { ...hidden, params: SessionParams.extend({ taskId: TaskId }) } },
    async (request, reply) =>
      sendPage(request, reply, async () => {
        const { id, taskId } = request.params;
        const view = await client.get(id);
        const task = view.tasks.find((t) => t.id === taskId);
        if (!task) {
          throw new OrqError('NOT_FOUND', `session ${id} has no task ${taskId}`, {
            hint: `Open ${UI_PATH}/sessions/${id} for its tasks.`,
          });
        }
        const { history, stream } = await historyAndStream(client, id);
        const body = taskBody({ session: view.session, task, usage: view.usage, history });
        return { title: `Task ${taskId}`, body, live: stream };
      }),
  );

  const refuseReadOnly = () => {
    if (options.readOnly) {
      throw new OrqError('FORBIDDEN', 'this server shows sessions read-only: no actions', {
        hint: 'Use the API with the token, or start the dashboard without --read-only-board.',
      });
    }
  };

  api.post(
    `${UI_PATH}/sessions/:id/cancel`,
    {
      schema: {
        ...hidden,
        params: SessionParams,
        body: CancelRequest,
        response: { 202: Accepted, 403: ApiError, 404: ApiError, 409: ApiError },
      },
    },
    async (request, reply) => {
      refuseReadOnly();
      await client.cancel(
        request.params.id,
        request.body?.reason ?? 'cancelled from the session view',
      );
      ctx.metrics.sessionActions.inc({ action: 'cancel' });
      return reply.code(202).send({ sessionId: request.params.id, accepted: true });
    },
  );

  api.post(
    `${UI_PATH}/sessions/:id/resume`,
    {
      schema: {
        ...hidden,
        params: SessionParams,
        body: ResumeRequest.nullish(),
        response: { 202: Accepted, 403: ApiError, 404: ApiError, 409: ApiError },
      },
    },
    async (request, reply) => {
      refuseReadOnly();
      const requestId = await resumeFor(client, request, request.params.id, request.body);
      ctx.metrics.sessionActions.inc({ action: 'resume' });
      return reply.code(202).send({ sessionId: request.params.id, requestId, accepted: true });
    },
  );
}
