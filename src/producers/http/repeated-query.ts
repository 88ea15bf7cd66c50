import type { FastifyInstance, FastifyRequest } from 'fastify';
import { ValidationError } from '../../shared/errors.js';

/**
 * Refuses a query parameter given more than once (`?limit=1&limit=2`) on orq's own routes,
 * naming it: Fastify hands it over as an array, which the schema would only call "NaN" or
 * "expected string". Every orq query parameter takes one value. Bull Board's routes, which
 * have no query schema of orq's, are left to it.
 */
export function refuseRepeatedQueryParameters(app: FastifyInstance): void {
  app.addHook('preValidation', async (request: FastifyRequest) => {
    if (!request.routeOptions.schema?.querystring) return;
    const query = (request.query ?? {}) as Record<string, unknown>;
    const repeated = Object.entries(query).filter(([, value]) => Array.isArray(value));
    if (repeated.length === 0) return;
    throw new ValidationError(
      'query',
      repeated.map(([name, values]) => ({
        path: name,
        message: `given ${(values as unknown[]).length} times; give it once`,
      })),
    );
  });
}
