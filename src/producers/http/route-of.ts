import type { FastifyRequest } from 'fastify';

/**
 * The route a request reached, as Fastify's router matched it (issue 53): every guard decides on
 * this, never on the raw URL. The router decodes `%xx` and cuts at `#` before it matches, so a
 * raw URL can spell one route as another: `POST /sessions/pr%75ne` is POST /sessions/prune, and
 * a guard that read `/sessions/pr%75ne` let a tenant's key prune every tenant's sessions.
 *
 * A matched request gives its route's pattern (`/sessions/:id/cancel`, with the id in
 * `request.params`, decoded). An unmatched one reaches only the not-found handler, so any answer
 * is safe; it gives its decoded path, so a mistyped page under /ui still finds its cookie and
 * answers 404 rather than asking to sign in.
 */
export function routeOf(request: FastifyRequest): string {
  return request.routeOptions.url ?? decodedPath(request.raw.url ?? request.url);
}

/** Whether the router matched a route (not the not-found handler). */
export const matchedRoute = (request: FastifyRequest): boolean =>
  request.routeOptions.url !== undefined;

/** The path of a request target: before `?` and `#`, with `%xx` decoded where it is valid. */
export function decodedPath(target: string): string {
  const path = target.split(/[?#]/, 1)[0] ?? '';
  try {
    return decodeURIComponent(path);
  } catch {
    return path;
  }
}
