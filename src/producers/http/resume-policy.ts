import type { FastifyRequest } from 'fastify';
import type { OrqClient, ResumeRequest } from '../client.js';
import { callerOf } from './auth.js';

/**
 * The one way the HTTP server resumes a session (issue 53), whatever route the request came
 * through (`POST /sessions/:id/resume`, the session view's `POST /ui/sessions/:id/resume`): the
 * session view's resume once skipped the budget ceiling the API's kept. The checks themselves
 * live in `client.resume`, where the request is applied; this says who asks:
 * - only the operator token may raise a budget above the server's own (issue 41);
 * - a tenant's key reaches its own tenant's sessions only (tenant-scope.ts, on every `:id`).
 * The CLI and the library hold Redis credentials: they are the operator, and are not limited.
 */
export function resumeFor(
  client: OrqClient,
  request: FastifyRequest,
  sessionId: string,
  body: ResumeRequest | null | undefined,
): Promise<string> {
  // 202 Accepted: the coordinator applies it asynchronously; don't hold the request open.
  return client.resume(sessionId, body ?? {}, {
    waitMs: 0,
    budgetWithinConfig: callerOf(request).role !== 'operator',
  });
}
