import type { FastifyRequest } from 'fastify';
import type { WaitAnswerInput } from '../../shared/domain/human-wait.js';
import { OrqError } from '../../shared/errors.js';
import type { AnswerOutcome, OrqClient } from '../client.js';
import { callerOf, isUnauthenticated } from './auth.js';

/** Credentials http.mayAnswer may name; tenant keys carry the right on their record. */
export type AnswerRole = 'operator' | 'api';

/** How long an answer's request waits for the coordinator, to say applied (200) or not (202). */
const ANSWER_WAIT_MS = 5_000;

/**
 * Who the history names as the one who answered: the credential, never its secret. The CLI
 * and the library say `cli` or what their caller gives.
 */
export function answererOf(request: FastifyRequest): string {
  const caller = callerOf(request);
  if (caller.role === 'tenant') return `tenant ${caller.tenant} (key ${caller.keyId})`;
  if (isUnauthenticated(request)) return 'http (no auth)';
  return caller.role === 'operator' ? 'operator token' : 'api token';
}

/**
 * The right to answer a wait for a person (issue 48), a right of its own: a program that
 * submits sessions is often not the person who should approve their plans. The operator token
 * holds it, the API token when http.mayAnswer lists `api`, a tenant's key when created with
 * `--may-answer` (its own tenant's sessions only, tenant-scope.ts), and anyone on a server with
 * no token (loopback only). Both routes that answer, the API's and the session view's, ask here.
 */
export function mayAnswer(request: FastifyRequest, roles: readonly AnswerRole[]): boolean {
  if (isUnauthenticated(request)) return true;
  const caller = callerOf(request);
  if (caller.role === 'tenant') return caller.rights.includes('answer');
  return roles.includes(caller.role);
}

export function answerFor(
  client: OrqClient,
  request: FastifyRequest,
  roles: readonly AnswerRole[],
  sessionId: string,
  answer: WaitAnswerInput,
  target: { waitId?: string | undefined; taskId?: string | undefined },
): Promise<AnswerOutcome> {
  if (!mayAnswer(request, roles)) {
    const caller = callerOf(request);
    throw new OrqError(
      'FORBIDDEN',
      `this ${caller.role === 'tenant' ? "tenant's key" : `${caller.role} token`} may not answer a session waiting for a person`,
      {
        hint:
          caller.role === 'tenant'
            ? 'Create a key with the right: orq keys create <tenant> --may-answer.'
            : 'Use the operator token (ORQ_OPERATOR_TOKEN), or list "api" in http.mayAnswer to let the API token answer.',
        details: { sessionId },
      },
    );
  }
  return client.answer(sessionId, answer, {
    by: answererOf(request),
    waitMs: ANSWER_WAIT_MS,
    ...(target.waitId !== undefined ? { waitId: target.waitId } : {}),
    ...(target.taskId !== undefined ? { taskId: target.taskId } : {}),
  });
}
