import { createHash, createHmac, timingSafeEqual } from 'node:crypto';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { OrqError } from '../../shared/errors.js';
import { UI_PATH } from './ui/html.js';
import { isLoopbackHost } from '../../shared/loopback.js';
import type { ApiKeyStore } from '../../shared/store/api-keys.js';
import { matchedRoute, routeOf } from './route-of.js';
import { crossSiteRefusal } from './same-origin.js';

/** Paths reached without a token: a pod's probes, and the index page (links only, no data). */
export const PUBLIC_PATHS: readonly string[] = ['/healthz', '/readyz', '/'];
export const BOARD_PATH = '/admin/queues';
/** The API reference (Swagger UI). */
export const DOCS_PATH = '/docs';
/** Pages a browser opens: their scripts and calls authenticate with the cookie below. */
const BROWSER_PAGES: readonly string[] = [BOARD_PATH, DOCS_PATH, UI_PATH];
/**
 * Cookie that carries the browser pages' credential, since a browser sends no bearer header for
 * <script>. Its name predates the API reference page, which takes it too.
 */
export const BOARD_COOKIE = 'orq_board';

/** Compares two secrets in constant time (hashing first makes the lengths equal). */
export function secretsEqual(given: string, expected: string): boolean {
  const a = createHash('sha256').update(given).digest();
  const b = createHash('sha256').update(expected).digest();
  return timingSafeEqual(a, b);
}

/** Who a request comes from, as its credential says (issue 41). */
export type CallerRole = 'operator' | 'api';
export type Caller =
  /** `operator`: ORQ_OPERATOR_TOKEN; `api`: ORQ_API_TOKEN, or anyone when the server has no token. */
  | { role: CallerRole }
  /** A tenant's API key (`orq keys create`): that tenant's sessions only. */
  | { role: 'tenant'; tenant: string; keyId: string; rights: readonly string[] };

/** The credentials a server checks; at least one of them turns auth on. */
export interface Credentials {
  /** ORQ_API_TOKEN: the API and the board's read-only pages. */
  token?: string;
  /** ORQ_OPERATOR_TOKEN: everything the API token may, plus the board's retry and clean. */
  operatorToken?: string;
  /** Where tenants' API keys are looked up (hashed); none accepted without it. */
  apiKeys?: ApiKeyStore;
}

const callers = new WeakMap<FastifyRequest, Caller>();
const ANONYMOUS: Caller = { role: 'api' };

/** Whether the server checks no credential (no token set, loopback only): anyone is the caller. */
export function isUnauthenticated(request: FastifyRequest): boolean {
  return !callers.has(request);
}

/** The caller installAuth recognised; an `api` caller when the server has no token. */
export function callerOf(request: FastifyRequest): Caller {
  return callers.get(request) ?? ANONYMOUS;
}

/** How long a browser page's cookie opens the pages before `?token=` is needed again. */
export const BOARD_COOKIE_SECONDS = 12 * 60 * 60;

function cookieMac(secret: string, role: CallerRole, expiresAt: number): string {
  return createHmac('sha256', secret)
    .update(`orq bull board|${role}|${expiresAt}`)
    .digest('base64url');
}

/**
 * The cookie value: `<role>.<expiry, unix seconds>.<HMAC of both under the role's token>`, so
 * the token itself never sits in the browser and a copied cookie stops working at its expiry.
 */
export function boardCookieValue(
  secret: string,
  role: CallerRole = 'api',
  expiresAt = Math.floor(Date.now() / 1000) + BOARD_COOKIE_SECONDS,
): string {
  return `${role}.${expiresAt}.${cookieMac(secret, role, expiresAt)}`;
}

/** The role a cookie proves, if its MAC holds and it has not expired. */
export function cookieRole(
  value: string,
  credentials: Credentials,
  nowSeconds = Math.floor(Date.now() / 1000),
): CallerRole | undefined {
  const [role, expiry, mac, ...rest] = value.split('.');
  if (rest.length > 0 || mac === undefined || !/^\d{1,12}$/.test(expiry ?? '')) return undefined;
  const expiresAt = Number(expiry);
  if (expiresAt <= nowSeconds) return undefined;
  const secret =
    role === 'operator'
      ? credentials.operatorToken
      : role === 'api'
        ? credentials.token
        : undefined;
  if (secret === undefined) return undefined;
  return secretsEqual(mac, cookieMac(secret, role as CallerRole, expiresAt))
    ? (role as CallerRole)
    : undefined;
}

/** The role a presented secret (bearer header or `?token=`) belongs to, if any. */
function roleOfSecret(given: string, credentials: Credentials): CallerRole | undefined {
  // Both compared every time, so the answer's timing says nothing about which one matched.
  const operator =
    credentials.operatorToken !== undefined && secretsEqual(given, credentials.operatorToken);
  const api = credentials.token !== undefined && secretsEqual(given, credentials.token);
  return operator ? 'operator' : api ? 'api' : undefined;
}

export function bearerToken(header: string | undefined): string | undefined {
  const match = /^Bearer\s+(.+)$/i.exec(header ?? '');
  return match?.[1]?.trim();
}

/**
 * A cookie's value, or undefined when it is absent or not valid percent-encoding: a malformed
 * cookie is no credential (a 401), not a server fault.
 */
export function readCookie(header: string | undefined, name: string): string | undefined {
  for (const part of (header ?? '').split(';')) {
    const index = part.indexOf('=');
    if (index > 0 && part.slice(0, index).trim() === name) {
      try {
        return decodeURIComponent(part.slice(index + 1).trim());
      } catch {
        return undefined;
      }
    }
  }
  return undefined;
}

/** The browser page (Bull Board, the API reference) a path belongs to, if any. */
const browserPageOf = (path: string): string | undefined =>
  BROWSER_PAGES.find((page) => path === page || path.startsWith(`${page}/`));

export { isLoopbackHost } from '../../shared/loopback.js';

/** Shortest API token accepted: 16 random characters are out of reach of guessing online. */
export const MIN_TOKEN_LENGTH = 16;

/**
 * Refuses to expose the API beyond this machine without a token (issue 6), and a token short
 * enough to guess anywhere.
 */
export function assertSafeToListen(
  host: string,
  token: string | undefined,
  operatorToken?: string,
): void {
  for (const [name, value] of [
    ['the API token (ORQ_API_TOKEN)', token],
    ['the operator token (ORQ_OPERATOR_TOKEN)', operatorToken],
  ] as const) {
    if (value !== undefined && value.length < MIN_TOKEN_LENGTH) {
      const variable = /\((\w+)\)/.exec(name)?.[1] ?? 'ORQ_API_TOKEN';
      throw new OrqError(
        'CONFIG_INVALID',
        `${name} has ${value.length} characters; at least ${MIN_TOKEN_LENGTH} are needed, a shorter one can be guessed`,
        { hint: `Set ${variable} to a long random secret, e.g. \`openssl rand -hex 32\`.` },
      );
    }
  }
  if (token !== undefined && operatorToken !== undefined && token === operatorToken) {
    throw new OrqError(
      'CONFIG_INVALID',
      'ORQ_OPERATOR_TOKEN is the same as ORQ_API_TOKEN: every API caller would be the operator',
      { hint: 'Give the operator a secret of its own, e.g. `openssl rand -hex 32`.' },
    );
  }
  if (!token && !operatorToken && !isLoopbackHost(host)) {
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

function refuse(reply: FastifyReply, path: string): FastifyReply {
  const page = browserPageOf(path);
  const hint = page
    ? `Open ${page}?token=<ORQ_API_TOKEN> once in the browser; it sets a cookie for ${BOARD_PATH}, ${DOCS_PATH} and ${UI_PATH}.`
    : 'Send the header `Authorization: Bearer <ORQ_API_TOKEN>`.';
  return reply
    .code(401)
    .header('www-authenticate', 'Bearer realm="orq"')
    .send({ error: 'UNAUTHORIZED', message: 'missing or wrong API token', hint });
}

/**
 * `Secure` over TLS, or behind a TLS-terminating proxy that http.trustProxy trusts to say so
 * (X-Forwarded-Proto: https); a browser then sends the cookie over TLS only.
 */
function cookieAttributes(request: FastifyRequest, scope: string): string {
  const secure = request.protocol === 'https' ? '; Secure' : '';
  return `Path=${scope}; HttpOnly; SameSite=Strict; Max-Age=${BOARD_COOKIE_SECONDS}${secure}`;
}

/** Methods that change nothing: a cookie alone authenticates them from any page. */
const SAFE_METHODS: readonly string[] = ['GET', 'HEAD', 'OPTIONS'];

/**
 * Bearer-token auth on every route but the probes and the index. Bull Board, the session view
 * and the API reference are browser pages whose scripts and API calls cannot carry a bearer
 * header, so `GET <page>?token=…` with a right token sets an HttpOnly cookie for the three pages
 * (scoped to their paths, expiring after BOARD_COOKIE_SECONDS) and redirects to the page without
 * the token in the address; the page then authenticates with that cookie. A cookie authenticates
 * a change (POST, PUT, …) only from this server's own pages (same-origin.ts). Either token opens
 * every route; callerOf(request) says which one it was.
 *
 * Every decision here is on the route the router matched (route-of.ts), never the raw URL.
 */
export function installAuth(app: FastifyInstance, credentials: Credentials): void {
  if (!credentials.token && !credentials.operatorToken) return;
  app.addHook('onRequest', async (request, reply) => {
    const route = routeOf(request);
    if (PUBLIC_PATHS.includes(route)) return;
    const bearer = bearerToken(request.headers.authorization);
    const byBearer = bearer === undefined ? undefined : roleOfSecret(bearer, credentials);
    if (byBearer) {
      callers.set(request, { role: byBearer });
      return;
    }
    const byKey =
      bearer !== undefined && credentials.apiKeys
        ? await credentials.apiKeys.lookup(bearer)
        : undefined;
    if (byKey) {
      callers.set(request, {
        role: 'tenant',
        tenant: byKey.tenant,
        keyId: byKey.id,
        rights: byKey.rights,
      });
      return;
    }
    const page = browserPageOf(route);
    if (page) {
      const fromCookie = readCookie(request.headers.cookie, BOARD_COOKIE);
      if (fromCookie === undefined && request.headers.cookie?.includes(`${BOARD_COOKIE}=`)) {
        request.log.debug({ route }, 'malformed browser cookie: treated as none');
      }
      const byCookie = fromCookie === undefined ? undefined : cookieRole(fromCookie, credentials);
      const query = request.query as Record<string, unknown> | undefined;
      const given = typeof query?.token === 'string' ? query.token : undefined;
      // A token in the address always leaves it (and the history) by a redirect, cookie or not.
      if (given !== undefined && request.method === 'GET' && matchedRoute(request)) {
        const byQuery = roleOfSecret(given, credentials);
        if (byQuery) return signIn(request, reply, byQuery, credentials);
        if (byCookie) return reply.redirect(withoutToken(request), 303);
      } else if (byCookie) {
        const crossSite = SAFE_METHODS.includes(request.method)
          ? undefined
          : crossSiteRefusal(request);
        if (crossSite) return reply.code(403).send(crossSite);
        callers.set(request, { role: byCookie });
        return;
      }
    }
    return refuse(reply, route);
  });
}

/** The request's own path and query, without `token`: where a sign-in redirects to. */
function withoutToken(request: FastifyRequest): string {
  const target = (request.raw.url ?? request.url).split('#', 1)[0] ?? '/';
  const at = target.indexOf('?');
  const path = at === -1 ? target : target.slice(0, at);
  const rest = new URLSearchParams(at === -1 ? '' : target.slice(at + 1));
  rest.delete('token');
  return rest.size > 0 ? `${path}?${rest.toString()}` : path;
}

/** Sets the browser pages' cookie for the role a `?token=` proved, and redirects without it. */
function signIn(
  request: FastifyRequest,
  reply: FastifyReply,
  role: CallerRole,
  credentials: Credentials,
): FastifyReply {
  const secret = role === 'operator' ? credentials.operatorToken! : credentials.token!;
  const cookie = boardCookieValue(secret, role);
  return reply
    .header(
      'set-cookie',
      BROWSER_PAGES.map(
        (scope) => `${BOARD_COOKIE}=${cookie}; ${cookieAttributes(request, scope)}`,
      ),
    )
    .redirect(withoutToken(request), 303);
}
