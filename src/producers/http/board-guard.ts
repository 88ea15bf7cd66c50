import type { FastifyInstance } from 'fastify';
import { BOARD_PATH, callerOf, type Caller } from './auth.js';

/**
 * What Bull Board's API may do for whom (issue 41). Bull Board itself can add jobs, rewrite a
 * job's data, pause, empty and obliterate queues: all of that goes around the API's override
 * policy and input checks, so it is refused here for everyone, whatever the board's UI shows.
 * Reading is open to any caller of the API; retry and clean, to the operator only.
 */

export type BoardDecision = { allowed: true } | { allowed: false; reason: string; hint: string };

const READ_METHODS: readonly string[] = ['GET', 'HEAD'];
/** The write actions an operator may take: they re-run or drop jobs orq itself made. */
const OPERATOR_ACTIONS: readonly string[] = ['retry', 'clean'];
const API_PREFIX = `${BOARD_PATH}/api/`;

/**
 * The operator action a board API call is, if it is one: `PUT api/queues/<queue>/retry/<status>`,
 * `…/<queue>/clean/<status>`, `…/<queue>/<job>/retry` or `…/<queue>/<job>/clean`.
 */
function operatorAction(method: string, path: string): string | undefined {
  if (method !== 'PUT' || !path.startsWith(`${API_PREFIX}queues/`)) return undefined;
  const segments = path.slice(`${API_PREFIX}queues/`.length).split('/');
  if (segments.length !== 3 || segments.some((s) => s.length === 0)) return undefined;
  const [, second, third] = segments as [string, string, string];
  if (OPERATOR_ACTIONS.includes(second)) return second;
  if (OPERATOR_ACTIONS.includes(third)) return third;
  return undefined;
}

/** Whether a call to the board (its page, assets or API) may go ahead. Pure: tested directly. */
export function boardDecision(
  method: string,
  path: string,
  role: Caller['role'],
  options: { readOnly: boolean; operatorConfigured: boolean },
): BoardDecision {
  if (READ_METHODS.includes(method) || !path.startsWith(API_PREFIX)) return { allowed: true };
  const action = operatorAction(method, path);
  if (action === undefined) {
    return {
      allowed: false,
      reason: `Bull Board may not change queues or jobs this way (${method} ${path.slice(BOARD_PATH.length)}): orq adds and edits jobs itself`,
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

/** Refuses (403 FORBIDDEN) every board call boardDecision refuses; runs after installAuth. */
export function installBoardGuard(
  app: FastifyInstance,
  options: { readOnly: boolean; operatorConfigured: boolean },
): void {
  app.addHook('onRequest', async (request, reply) => {
    const url = request.raw.url ?? request.url;
    const path = url.split('?')[0] ?? url;
    if (path !== BOARD_PATH && !path.startsWith(`${BOARD_PATH}/`)) return;
    const decision = boardDecision(request.method, path, callerOf(request).role, options);
    if (decision.allowed) return;
    return reply
      .code(403)
      .send({ error: 'FORBIDDEN', message: decision.reason, hint: decision.hint });
  });
}
