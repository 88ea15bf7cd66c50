import type { FastifyInstance, FastifyRequest } from 'fastify';
import { OrqError } from '../../shared/errors.js';
import { sessionNotFound } from '../../shared/store/session-reads.js';
import type { OrqClient } from '../client.js';
import { callerOf } from './auth.js';
import { matchedRoute, routeOf } from './route-of.js';

/**
 * What a tenant's API key reaches (issue 41): its own tenant's sessions, nothing else. Other
 * tenants' sessions answer 404 as a missing one does, so a key learns nothing of them; the
 * routes about every tenant (prune, /tenants, /quotas, /metrics, Bull Board, /docs) answer 403.
 * A submit is for the key's tenant, and its idempotency key lives in that tenant's namespace,
 * so two tenants' keys never meet (a reused key's 409 could name another tenant's session).
 */

/**
 * Routes a tenant key may call, by the pattern the router matched (route-of.ts): the session
 * routes, whose `:id` the preHandler below checks, and the API's description. Never the raw URL,
 * where `/sessions/pr%75ne` passed for a session's route and reached every tenant's prune.
 */
export function tenantMayCall(route: string): boolean {
  if (route === '/openapi.json' || route === '/sessions') return true;
  return route === '/sessions/:id' || route.startsWith('/sessions/:id/');
}

/** The idempotency key as the store keeps it for a tenant's submit. */
export const tenantIdempotencyKey = (tenant: string, key: string): string => `${tenant}/${key}`;

export function installTenantScope(app: FastifyInstance, client: OrqClient): void {
  app.addHook('onRequest', async (request, reply) => {
    const caller = callerOf(request);
    // No route matched: only the not-found handler answers, with nothing of any tenant's.
    if (caller.role !== 'tenant' || !matchedRoute(request)) return;
    const route = routeOf(request);
    if (tenantMayCall(route)) return;
    return reply.code(403).send({
      error: 'FORBIDDEN',
      message: `a tenant's API key may not call ${request.method} ${route}: it reaches its own tenant's sessions only`,
      hint: 'Use /sessions and /sessions/:id/...; the operator (ORQ_API_TOKEN, ORQ_OPERATOR_TOKEN) sees every tenant.',
    });
  });

  app.addHook('preHandler', async (request: FastifyRequest) => {
    const caller = callerOf(request);
    if (caller.role !== 'tenant') return;
    const id = (request.params as { id?: unknown } | undefined)?.id;
    if (typeof id === 'string') {
      const snapshot = await client.store.loadSession(id);
      if (!snapshot || snapshot.session.tenant !== caller.tenant) throw sessionNotFound(id);
      return;
    }
    if (request.method === 'POST' && request.routeOptions.url === '/sessions') {
      const body = request.body as { tenant?: string; idempotencyKey?: string };
      if (body.tenant !== undefined && body.tenant !== caller.tenant) {
        throw sessionForbidden(caller.tenant, body.tenant);
      }
      body.tenant = caller.tenant;
      if (body.idempotencyKey !== undefined) {
        body.idempotencyKey = tenantIdempotencyKey(caller.tenant, body.idempotencyKey);
      }
    }
  });
}

/**
 * The tenant whose sessions a listing shows: a tenant key's own (asking for another is
 * refused), or the one the operator asked for, or every tenant's.
 */
export function listedTenant(request: FastifyRequest, asked: string | undefined) {
  const caller = callerOf(request);
  if (caller.role !== 'tenant') return asked;
  if (asked !== undefined && asked !== caller.tenant) {
    throw new OrqError(
      'FORBIDDEN',
      `this API key lists tenant ${caller.tenant}'s sessions, not ${asked}'s`,
      {
        hint: 'Leave tenant out, or use a key of that tenant.',
      },
    );
  }
  return caller.tenant;
}

/** The sessions of the caller's tenant only, when it is a tenant key. */
export function visibleTo<T extends { tenant: string }>(
  request: FastifyRequest,
  sessions: T[],
): T[] {
  const caller = callerOf(request);
  return caller.role === 'tenant' ? sessions.filter((s) => s.tenant === caller.tenant) : sessions;
}

function sessionForbidden(own: string, asked: string): OrqError {
  return new OrqError('FORBIDDEN', `this API key submits for tenant ${own}, not ${asked}`, {
    hint: 'Leave tenant out, or use a key of that tenant.',
  });
}
