import type { FastifyInstance } from 'fastify';
import { type RouteContext } from './context.js';

/** Prometheus scrape endpoint (text exposition format). */
export function registerMetricsRoute(app: FastifyInstance, ctx: RouteContext): void {
  app.get(
    '/metrics',
    {
      schema: {
        tags: ['metrics'],
        summary: 'Prometheus metrics: queue depths, sessions by state, API counters',
        produces: ['text/plain'],
      },
    },
    async (_request, reply) => {
      const text = await ctx.metrics.registry.metrics();
      return reply.type(ctx.metrics.registry.contentType).send(text);
    },
  );
}
