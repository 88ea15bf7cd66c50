import type { FastifyInstance } from 'fastify';
import { z } from 'zod';
import { QuotaView } from '../../../shared/domain/quota.js';
import { typed, type RouteContext } from './context.js';

export const QuotaList = z.object({ quotas: z.array(QuotaView) });

/** Provider quotas (issue 33): every limit the pods have used, as `orq status` shows them. */
export function registerQuotaRoutes(app: FastifyInstance, ctx: RouteContext): void {
  typed(app).get(
    '/quotas',
    {
      schema: {
        tags: ['quotas'],
        summary:
          'Provider limits (llm.<role>.rateLimit): what is left now, calls in flight, pause after a 429, calls granted, waits and 429s',
        response: { 200: QuotaList },
      },
    },
    async () => ({ quotas: await ctx.client.quotas() }),
  );
}
