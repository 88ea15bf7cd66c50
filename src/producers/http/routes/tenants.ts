import type { FastifyInstance } from 'fastify';
import { z } from 'zod';
import { TenantLoad } from '../../../shared/store/tenant-load.js';
import { typed, type RouteContext } from './context.js';

/** GET /tenants: what each tenant has in flight and waiting now (docs/fairness.md). */
export function registerTenantRoutes(app: FastifyInstance, ctx: RouteContext): void {
  typed(app).get(
    '/tenants',
    {
      schema: {
        tags: ['sessions'],
        summary: 'Per tenant: sessions with work, tasks in flight and tasks waiting for a slot',
        response: { 200: z.object({ tenants: z.array(TenantLoad) }) },
      },
    },
    async () => ({ tenants: await ctx.client.tenants() }),
  );
}
