import type { FastifyInstance } from 'fastify';
import FindMyWay, { type HTTPMethod } from 'find-my-way';

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
): (path: string) => HTTPMethod[] {
  const router = FindMyWay(routerOptions);
  const methods = new Set<HTTPMethod>();
  app.addHook('onRoute', (route) => {
    for (const method of [route.method].flat() as HTTPMethod[]) {
      methods.add(method);
      router.on(method, route.url, () => undefined);
    }
  });
  return (path) => [...methods].filter((method) => router.find(method, path) !== null).sort();
}
