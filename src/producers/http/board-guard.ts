import type { FastifyInstance } from 'fastify';
import { BOARD_PATH, callerOf, type Caller } from './auth.js';

/**
 * What Bull Board may do for whom (issues 41 and 53). Bull Board itself can add jobs, rewrite a
 * job's data, pause, empty and obliterate queues: all of that goes around the API's override
 * policy and input checks. So its routes are allowed by name, as the router matched them (their
 * patterns: `request.routeOptions.url`, see route-of.ts), never by the raw URL: a route on neither list below is refused for
 * everyone, however it is spelled, and so is any route a later Bull Board adds.
 */

export type BoardDecision = { allowed: true } | { allowed: false; reason: string; hint: string };

const READ_METHODS: readonly string[] = ['GET', 'HEAD'];

/** The board's pages, assets and the API calls its UI reads with: open to any API caller. */
export const BOARD_READ_ROUTES: readonly string[] = [
  '',
  '/',
  '/static/*',
  '/metrics-history',
  '/job-schedulers',
  '/queue/:queueName',
  '/queue/:queueName/:jobId',
  '/api/redis/stats',
  '/api/queues',
  '/api/job-schedulers',
  '/api/queues/:queueName/metrics',
  '/api/queues/:queueName/default-job-options',
  '/api/queues/:queueName/workers',
  '/api/queues/:queueName/rate-limit',
  '/api/queues/:queueName/job-data-schema',
  '/api/queues/:queueName/:jobId',
  '/api/queues/:queueName/:jobId/logs',
  '/api/queues/:queueName/:jobId/flow',
].map((route) => `${BOARD_PATH}${route}`);

/**
 * The write calls the operator may make (PUT): they re-run or drop jobs orq itself made. The
 * value is the action's name in a refusal.
 */
export const BOARD_OPERATOR_ROUTES: ReadonlyMap<string, string> = new Map(
  (
    [
      ['/api/queues/:queueName/retry/:queueStatus', 'retry'],
      ['/api/queues/:queueName/:jobId/retry', 'retry'],
      ['/api/queues/:queueName/clean/:queueStatus', 'clean'],
      ['/api/queues/:queueName/:jobId/clean', 'clean'],
    ] as const
  ).map(([route, action]) => [`${BOARD_PATH}${route}`, action]),
);

/** Whether a route (its pattern, route-of.ts) is the board's: its page, assets or API. */
export const isBoardRoute = (route: string): boolean =>
  route === BOARD_PATH || route.startsWith(`${BOARD_PATH}/`);

/**
 * Whether a call to a board route may go ahead. `route` is the pattern the router matched.
 * Pure: tested directly, over every route the board registers.
 */
export function boardDecision(
  method: string,
  route: string,
  role: Caller['role'],
  options: { readOnly: boolean; operatorConfigured: boolean },
): BoardDecision {
  if (READ_METHODS.includes(method) && BOARD_READ_ROUTES.includes(route)) return { allowed: true };
  const action = method === 'PUT' ? BOARD_OPERATOR_ROUTES.get(route) : undefined;
  if (action === undefined) {
    return {
      allowed: false,
      reason: `Bull Board may not change queues or jobs this way (${method} ${route.slice(BOARD_PATH.length)}): orq adds and edits jobs itself`,
      hint: 'Submit, cancel or resume sessions through the API (POST /sessions, /sessions/:id/cancel, /sessions/:id/resume). The board lets the operator retry and clean jobs, nothing else.',
    };
  }
  if (options.readOnly) {
    return {
      allowed: false,
      reason: `Bull Board is read-only on this server: no ${action}`,
      hint: 'The operator turns it off with http.readOnlyBoard: false (no --read-only-board).',
    };
  }
  if (role !== 'operator') {
    return {
      allowed: false,
      reason: `only the operator may ${action} jobs from Bull Board`,
      hint: options.operatorConfigured
        ? 'Open the board with ?token=<ORQ_OPERATOR_TOKEN>, or send it as the bearer token.'
        : 'Start `orq dashboard` with ORQ_OPERATOR_TOKEN set, then open the board with ?token=<ORQ_OPERATOR_TOKEN>.',
    };
  }
  return { allowed: true };
}

/**
 * Refuses (403 FORBIDDEN) every board call boardDecision refuses; runs after installAuth. A
 * request no route matched reaches only the not-found handler, and passes on to it.
 */
export function installBoardGuard(
  app: FastifyInstance,
  options: { readOnly: boolean; operatorConfigured: boolean },
): void {
  app.addHook('onRequest', async (request, reply) => {
    const route = request.routeOptions.url;
    if (route === undefined || !isBoardRoute(route)) return;
    const decision = boardDecision(request.method, route, callerOf(request).role, options);
    if (decision.allowed) return;
    return reply
      .code(403)
      .send({ error: 'FORBIDDEN', message: decision.reason, hint: decision.hint });
  });
}
