import type { FastifyRequest } from 'fastify';
import type { ApiError } from './errors.js';

/**
 * Cross-site request forgery (issue 53). The browser pages' cookie is SameSite=Strict, which
 * keeps other sites out but not another port or subdomain of the same site: a page on
 * http://127.0.0.1:8080 could post to the session view on :3000 with the cookie. So a cookie
 * authenticates a change only when the browser says the request comes from this origin:
 * `Sec-Fetch-Site: same-origin`, or, from a browser that sends no Fetch Metadata, an `Origin`
 * equal to this server's. A request with neither is refused: every browser that sends cookies
 * sends one of them on a POST, PUT, PATCH or DELETE. Bearer-token calls are not checked: a page
 * cannot make a browser send a bearer header.
 */
export function crossSiteRefusal(request: FastifyRequest): ApiError | undefined {
  const site = header(request, 'sec-fetch-site');
  const origin = header(request, 'origin');
  if (site !== undefined) {
    if (site === 'same-origin') return undefined;
    return refusal(`the browser says it comes from a ${site} page (Sec-Fetch-Site)`);
  }
  if (origin === undefined) return refusal('it names no Origin');
  // request.host and request.protocol are what the client asked for, or what a proxy that
  // http.trustProxy trusts says it asked for.
  if (origin === `${request.protocol}://${request.host}`) return undefined;
  return refusal(`it comes from ${origin}`);
}

function header(request: FastifyRequest, name: string): string | undefined {
  const value = request.headers[name];
  return typeof value === 'string' ? value : undefined;
}

function refusal(why: string): ApiError {
  return {
    error: 'FORBIDDEN',
    message: `a browser page's cookie authenticates changes from this server's own pages only: ${why}`,
    hint: 'Use the buttons of the session view or Bull Board on this server, or call the API with `Authorization: Bearer <ORQ_API_TOKEN>`.',
  };
}
