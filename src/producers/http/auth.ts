import { createHash, createHmac, timingSafeEqual } from 'node:crypto';
import { isIP } from 'node:net';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { OrqError } from '../../shared/errors.js';

/** Paths a pod's probes reach without a token. */
export const PUBLIC_PATHS: readonly string[] = ['/healthz', '/readyz'];
export const BOARD_PATH = '/admin/queues';
/** Cookie that carries the board's credential, since a browser sends no bearer header for <script>. */
export const BOARD_COOKIE = 'orq_board';

/** Compares two secrets in constant time (hashing first makes the lengths equal). */
export function secretsEqual(given: string, expected: string): boolean {
  const a = createHash('sha256').update(given).digest();
  const b = createHash('sha256').update(expected).digest();
  return timingSafeEqual(a, b);
}

/** The cookie value: derived from the token so the token itself never sits in the browser. */
export function boardCookieValue(token: string): string {
  return createHmac('sha256', token).update('orq bull board').digest('base64url');
}

export function bearerToken(header: string | undefined): string | undefined {
  const match = /^Bearer\s+(.+)$/i.exec(header ?? '');
  return match?.[1]?.trim();
}

export function readCookie(header: string | undefined, name: string): string | undefined {
  for (const part of (header ?? '').split(';')) {
    const index = part.indexOf('=');
    if (index > 0 && part.slice(0, index).trim() === name)
      return decodeURIComponent(part.slice(index + 1).trim());
  }
  return undefined;
}

const isBoardPath = (path: string): boolean =>
  path === BOARD_PATH || path.startsWith(`${BOARD_PATH}/`);

/** True for addresses only this machine can reach: 127.0.0.0/8, ::1, localhost. */
export function isLoopbackHost(host: string): boolean {
  const bare = host.replace(/^\[|\]$/g, '').toLowerCase();
  if (bare === 'localhost') return true;
  if (isIP(bare) === 4) return bare.startsWith('127.');
  if (isIP(bare) === 6) return bare === '::1' || /^::ffff:127\./.test(bare);
  return false;
}

/** Shortest API token accepted: 16 random characters are out of reach of guessing online. */
export const MIN_TOKEN_LENGTH = 16;

/**
 * Refuses to expose the API beyond this machine without a token (issue 6), and a token short
 * enough to guess anywhere.
 */
export function assertSafeToListen(host: string, token: string | undefined): void {
  if (token !== undefined && token.length < MIN_TOKEN_LENGTH) {
    throw new OrqError(
      'CONFIG_INVALID',
      `the API token (ORQ_API_TOKEN) has ${token.length} characters; at least ${MIN_TOKEN_LENGTH} are needed, a shorter one can be guessed`,
      { hint: 'Set ORQ_API_TOKEN to a long random secret, e.g. `openssl rand -hex 32`.' },
    );
  }
  if (!token && !isLoopbackHost(host)) {
    throw new OrqError(
      'CONFIG_INVALID',
      `refusing to listen on ${host} without an API token: anyone who can reach it could submit and cancel sessions`,
      {
        hint: 'Set ORQ_API_TOKEN to a long random secret (e.g. `openssl rand -hex 32`), or listen on 127.0.0.1',
        details: { host },
      },
    );
  }
}

function pathOf(request: FastifyRequest): string {
  const url = request.raw.url ?? request.url;
  const index = url.indexOf('?');
  return index === -1 ? url : url.slice(0, index);
}

function refuse(reply: FastifyReply, path: string): FastifyReply {
  const hint = isBoardPath(path)
    ? `Open ${BOARD_PATH}?token=<ORQ_API_TOKEN> once in the browser; it sets a cookie for the board.`
    : 'Send the header `Authorization: Bearer <ORQ_API_TOKEN>`.';
  return reply
    .code(401)
    .header('www-authenticate', 'Bearer realm="orq"')
    .send({ error: 'UNAUTHORIZED', message: 'missing or wrong API token', hint });
}

/**
 * Bearer-token auth on every route but the probes. Bull Board is a browser page whose scripts
 * and API calls cannot carry a bearer header, so `GET /admin/queues?token=…` with the right token
 * sets an HttpOnly cookie (scoped to the board's path) and redirects to the board without the
 * token in the address; the board then authenticates with that cookie.
 */
export function installAuth(app: FastifyInstance, token: string | undefined): void {
  if (!token) return;
  const cookie = boardCookieValue(token);
  app.addHook('onRequest', async (request, reply) => {
    const path = pathOf(request);
    if (PUBLIC_PATHS.includes(path)) return;
    const bearer = bearerToken(request.headers.authorization);
    if (bearer !== undefined && secretsEqual(bearer, token)) return;
    if (isBoardPath(path)) {
      const fromCookie = readCookie(request.headers.cookie, BOARD_COOKIE);
      if (fromCookie !== undefined && secretsEqual(fromCookie, cookie)) return;
      const query = request.query as Record<string, unknown> | undefined;
      const given = typeof query?.token === 'string' ? query.token : undefined;
      if (request.method === 'GET' && given !== undefined && secretsEqual(given, token)) {
        const rest = new URLSearchParams(request.raw.url?.split('?')[1] ?? '');
        rest.delete('token');
        const target = rest.size > 0 ? `${path}?${rest.toString()}` : path;
        return reply
          .header(
            'set-cookie',
            `${BOARD_COOKIE}=${cookie}; Path=${BOARD_PATH}; HttpOnly; SameSite=Strict`,
          )
          .redirect(target, 303);
      }
    }
    return refuse(reply, path);
  });
}
