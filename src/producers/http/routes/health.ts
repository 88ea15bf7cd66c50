import type { FastifyInstance } from 'fastify';
import { pingRedis } from '../../../shared/redis.js';
import { Health } from '../schemas.js';
import { typed, type RouteContext } from './context.js';

/** Probes for pods: liveness never touches Redis; readiness needs Redis to answer a PING. */
export function registerHealthRoutes(app: FastifyInstance, ctx: RouteContext): void {
  const api = typed(app);
  api.get(
    '/healthz',
    {
      schema: {
        tags: ['health'],
        summary: 'Liveness: 200 while the process serves requests',
        response: { 200: Health },
      },
    },
    async () => ({ status: 'ok' as const }),
  );

  api.get(
    '/readyz',
    {
      schema: {
        tags: ['health'],
        summary: 'Readiness: 200 when Redis answers a PING, 503 otherwise',
        response: { 200: Health, 503: Health },
      },
    },
    async (_request, reply) => {
      const up = await pingRedis(ctx.client.store.redis);
      return reply
        .code(up ? 200 : 503)
        .send(up ? { status: 'ok', redis: 'up' } : { status: 'unavailable', redis: 'unreachable' });
    },
  );
}
