import type { FastifyInstance } from 'fastify';
import FindMyWay, { type HTTPMethod } from 'find-my-way';

export interface RouteMethods {
  /** Methods with a route matching `path`, parametric routes included. */
  allowed(path: string): HTTPMethod[];
  /** Methods of routes registered at exactly `path` (no parameters), such as POST /sessions/prune. */
  literal(path: string): HTTPMethod[];
}

/**
 * Which methods the server has a route for at a path, so that a request whose path exists but
 * whose method does not answers 405 with an Allow header (RFC 9110 §15.5.6) rather than 404.
 * Fastify's router cannot say why it found nothing; a second find-my-way router (Fastify's own
 * router library, with the same options) holds every route's method and path and answers that.
 * Call before any route is registered: it learns them from the onRoute hook.
 */
export function trackAllowedMethods(
  app: FastifyInstance,
  routerOptions: { maxParamLength?: number } = {},
): RouteMethods {
  const router = FindMyWay(routerOptions);
  const methods = new Set<HTTPMethod>();
  const literal = new Map<string, Set<HTTPMethod>>();
  app.addHook('onRoute', (route) => {
    for (const method of [route.method].flat() as HTTPMethod[]) {
      methods.add(method);
      router.on(method, route.url, () => undefined);
      if (!/[:*]/.test(route.url)) {
        literal.set(route.url, (literal.get(route.url) ?? new Set()).add(method));
      }
    }
  });
  return {
    allowed: (path) => [...methods].filter((method) => router.find(method, path) !== null).sort(),
    literal: (path) => [...(literal.get(path) ?? [])].sort(),
  };
}
