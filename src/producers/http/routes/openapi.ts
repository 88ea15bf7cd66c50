import type { FastifyInstance } from 'fastify';

/** The OpenAPI document generated from the routes' zod schemas by @fastify/swagger. */
export function registerOpenApiRoute(app: FastifyInstance): void {
  app.get('/openapi.json', { schema: { hide: true } }, async (_request, reply) =>
    reply.type('application/json; charset=utf-8').send(app.swagger()),
  );
}
