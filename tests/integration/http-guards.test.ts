import { randomUUID } from 'node:crypto';
import { Queue } from 'bullmq';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { createClient, type OrqClient } from '../../src/producers/client.js';
import type { RunningHttpServer } from '../../src/producers/http/server.js';
import { ApiKeyStore } from '../../src/shared/store/api-keys.js';
import { bearer, serveApi } from '../support/http.js';
import { rawRequest } from '../support/raw-http.js';
import { moveSession } from '../support/session-state.js';

/**
 * Issue 53: the guards decide on the route the router matched, so no spelling of a request
 * reaches what its plain spelling may not. Each finding of the probe (H1, H2, M1, L1-L4, I1) has
 * its own test; the property at the end sends every guarded request spelled many ways.
 */

const TOKEN = 'guards-api-token-0123456789';
const OPERATOR = 'guards-operator-token-9876543210';

let client: OrqClient;
let server: RunningHttpServer;
let prefix: string;
let acme: string;
let acmeSession: string;
let globexSession: string;
let apiCookie: string;

const cookieOf = (setCookie: string | string[] | undefined) =>
  [setCookie ?? []].flat()[0]!.split(';')[0]!;

beforeAll(async () => {
  prefix = `grd${randomUUID().slice(0, 8)}`;
  client = await createClient({
    connection: inject('redisUrl'),
    prefix,
    config: { budget: { maxTokens: 50_000 } },
  });
  server = await serveApi(client, { token: TOKEN, operatorToken: OPERATOR });
  const keys = new ApiKeyStore(client.store.redis, prefix);
  acme = (await keys.create('acme')).key;
  acmeSession = (await client.submit({ instruction: 'acme work', tenant: 'acme' })).id;
  globexSession = (await client.submit({ instruction: 'globex work', tenant: 'globex' })).id;
  // Finished, so a prune would list (dryRun) or delete it.
  await moveSession(client, globexSession, 'FAILED');
  const signIn = await rawRequest(server.url, 'GET', `/ui?token=${TOKEN}`);
  apiCookie = cookieOf(signIn.headers['set-cookie']);
}, 30_000);

afterAll(async () => {
  await server?.close();
  await client?.close();
});

describe("H1: a tenant's key and every tenant's prune", () => {
  it('refuses POST /sessions/prune however the path is spelled, and deletes nothing', async () => {
    for (const target of ['/sessions/prune', '/sessions/pr%75ne', '/sessions/prune#x']) {
      const res = await rawRequest(server.url, 'POST', target, bearer(acme), {
        olderThanSeconds: 0,
      });
      expect(res.status, target).toBe(403);
      expect(res.body, target).not.toContain(globexSession);
    }
    expect(await client.store.loadSession(globexSession)).toBeDefined();
  });
});

describe('H2: the API token and Bull Board', () => {
  it('refuses pausing, adding and obliterating however the path is spelled', async () => {
    const queue = new Queue('replan', { connection: client.store.redis, prefix });
    for (const [method, target] of [
      ['PUT', '/admin/%71ueues/api/queues/replan/pause'],
      ['PUT', '/admin/queues/%61pi/queues/replan/pause'],
      ['PUT', '/admin/queues/api/queues/replan/pause#x'],
      ['POST', '/admin/queues/%61pi/queues/replan/add'],
      ['PUT', '/admin/queues/%61pi/queues/replan/obliterate'],
    ] as const) {
      const res = await rawRequest(server.url, method, target, bearer(TOKEN), {
        name: 'forged',
        data: {},
      });
      expect(res.status, `${method} ${target}`).toBe(403);
    }
    expect(await queue.isPaused()).toBe(false);
    expect(await queue.count()).toBe(0);
  });
});

describe('M1: one budget ceiling for resume, whichever route', () => {
  it("refuses a budget over the server's own from the session view as from the API", async () => {
    const id = (await client.submit({ instruction: 'over budget' })).id;
    await moveSession(client, id, 'BUDGET_EXHAUSTED');
    const body = { mode: 'retry', budget: { maxTokens: 100_000_000 } };
    const origin = { origin: server.url };
    const viaApi = await rawRequest(
      server.url,
      'POST',
      `/sessions/${id}/resume`,
      bearer(TOKEN),
      body,
    );
    const viaView = await rawRequest(
      server.url,
      'POST',
      `/ui/sessions/${id}/resume`,
      { cookie: apiCookie, ...origin },
      body,
    );
    expect(viaApi.status).toBe(403);
    expect(viaView.status).toBe(403);
    expect(JSON.parse(viaView.body)).toMatchObject({ error: 'FORBIDDEN' });
    expect(await client.requestPending(id)).toBe(false);
    // The operator may raise it, from either route.
    const operator = await rawRequest(
      server.url,
      'POST',
      `/sessions/${id}/resume`,
      bearer(OPERATOR),
      body,
    );
    expect(operator.status).toBe(202);
  });
});

describe("L1: the session view's actions come from its own pages only", () => {
  it('refuses a cookie-authenticated cancel from another origin, or naming none', async () => {
    const id = (await client.submit({ instruction: 'not to be cancelled' })).id;
    const target = `/ui/sessions/${id}/cancel`;
    for (const headers of [
      {},
      { origin: 'http://127.0.0.1:1' },
      { origin: server.url, 'sec-fetch-site': 'same-site' },
      { 'sec-fetch-site': 'cross-site' },
    ] as Record<string, string>[]) {
      const res = await rawRequest(server.url, 'POST', target, { cookie: apiCookie, ...headers });
      expect(res.status, JSON.stringify(headers)).toBe(403);
    }
    expect(await client.requestPending(id)).toBe(false);
    for (const headers of [{ origin: server.url }, { 'sec-fetch-site': 'same-origin' }] as Record<
      string,
      string
    >[]) {
      const res = await rawRequest(server.url, 'POST', target, { cookie: apiCookie, ...headers });
      expect(res.status, JSON.stringify(headers)).toBe(202);
    }
  });
});

describe('L2-L4: cookies and the token in the address', () => {
  it('answers a malformed cookie 401, not 500', async () => {
    const res = await rawRequest(server.url, 'GET', '/ui', { cookie: 'orq_board=%E0%A4%A' });
    expect(res.status).toBe(401);
  });

  it('marks the cookie Secure behind a TLS proxy only where http.trustProxy trusts it', async () => {
    const proxied = await serveApi(client, { token: TOKEN, trustProxy: true });
    try {
      const behind = await rawRequest(proxied.url, 'GET', `/ui?token=${TOKEN}`, {
        'x-forwarded-proto': 'https',
      });
      expect(behind.status).toBe(303);
      expect([behind.headers['set-cookie']].flat()[0]).toContain('; Secure');
    } finally {
      await proxied.close();
    }
    const direct = await rawRequest(server.url, 'GET', `/ui?token=${TOKEN}`, {
      'x-forwarded-proto': 'https',
    });
    expect([direct.headers['set-cookie']].flat()[0]).not.toContain('Secure');
  });

  it('redirects ?token= away even with a valid cookie already set', async () => {
    for (const token of [TOKEN, 'not-the-token-at-all-0000']) {
      const res = await rawRequest(server.url, 'GET', `/ui?state=RUNNING&token=${token}`, {
        cookie: apiCookie,
      });
      expect(res.status).toBe(303);
      expect(res.headers.location).toBe('/ui?state=RUNNING');
    }
  });
});

describe('I1: event streams per caller', () => {
  it('answers 429 past http.maxStreamsPerCaller, and frees a slot when a stream closes', async () => {
    const capped = await serveApi(client, { token: TOKEN, maxStreamsPerCaller: 2 });
    const open = (signal: AbortSignal) =>
      fetch(`${capped.url}/sessions/${acmeSession}/events`, { headers: bearer(TOKEN), signal });
    const first = new AbortController();
    const second = new AbortController();
    try {
      expect((await open(first.signal)).status).toBe(200);
      expect((await open(second.signal)).status).toBe(200);
      const third = await fetch(`${capped.url}/sessions/${acmeSession}/events`, {
        headers: bearer(TOKEN),
      });
      expect(third.status).toBe(429);
      expect(await third.json()).toMatchObject({ error: 'TOO_MANY_REQUESTS' });
      // The operator's streams count apart from the API token's.
      const operator = new AbortController();
      const byOperator = await fetch(`${capped.url}/sessions/${acmeSession}/events`, {
        headers: bearer(OPERATOR),
        signal: operator.signal,
      });
      operator.abort();
      expect(byOperator.status).not.toBe(429);
      first.abort();
      await expect
        .poll(async () => {
          const again = new AbortController();
          const res = await open(again.signal);
          again.abort();
          return res.status;
        })
        .toBe(200);
    } finally {
      first.abort();
      second.abort();
      await capped.close();
    }
  });
});

/** A request some credential may not make, with what each credential gets spelled plainly. */
interface Guarded {
  method: string;
  path: string;
  body?: unknown;
  headers?: Record<string, string>;
}

/**
 * Spellings that reach the same route: the router decodes `%xx` and cuts at `#`. These must get
 * exactly the plain spelling's answer.
 */
const sameRoute = (path: string) =>
  fc.oneof(
    // Percent-encode some letters of the path (hex in either case).
    fc.array(fc.nat(), { minLength: 1, maxLength: 4 }).chain((picks) =>
      fc.boolean().map((upper) => {
        const chars = [...path];
        const letters = chars.flatMap((c, i) => (/[a-z]/i.test(c) ? [i] : []));
        for (const pick of picks) {
          const at = letters[pick % letters.length]!;
          const hex = chars[at]!.charCodeAt(0).toString(16);
          if (chars[at]!.length === 1) chars[at] = `%${upper ? hex.toUpperCase() : hex}`;
        }
        return chars.join('');
      }),
    ),
    fc.string({ maxLength: 8 }).map((fragment) => `${path}#${encodeURIComponent(fragment)}`),
  );

/**
 * Spellings a router may or may not take for the same route (Fastify's takes none of these).
 * Each must get the plain answer, or a refusal that reaches no route: 400 (a bad URL), 401 (no
 * cookie outside the browser pages), 404 or 405.
 */
const otherRoute = (path: string) =>
  fc
    .tuple(
      fc.constantFrom(
        (p: string, i: number) => `${p.slice(0, i)}/${p.slice(i)}`, // a doubled slash
        (p: string, i: number) => `${p.slice(0, i)}%2F${p.slice(i + 1)}`, // an encoded slash
        (p: string, i: number) => `${p.slice(0, i)}%2f${p.slice(i + 1)}`,
        (p: string, i: number) => `${p.slice(0, i)}/.${p.slice(i)}`, // a . segment
        (p: string, i: number) => `${p.slice(0, i)}/x/..${p.slice(i)}`, // a .. segment
        (p: string, i: number) => `${p.slice(0, i)};a=b${p.slice(i)}`, // a ; parameter
        (p: string) => `${p}/`, // a trailing slash
        (p: string) => p.toUpperCase(), // another case
        (p: string) => p.replace(/[a-z]/, (c) => c.toUpperCase()),
      ),
      fc.nat(),
    )
    .map(([spell, pick]) => {
      const slashes = [...path].flatMap((c, i) => (c === '/' && i > 0 ? [i] : []));
      return spell(path, slashes.length > 0 ? slashes[pick % slashes.length]! : path.length);
    });

describe('every guarded route, every credential, many spellings', () => {
  const credentials = (): Record<string, Record<string, string>> => ({
    none: {},
    tenant: bearer(acme),
    api: bearer(TOKEN),
    apiCookie: { cookie: apiCookie },
    apiCookieSameOrigin: { cookie: apiCookie, origin: server.url },
    operator: bearer(OPERATOR),
  });
  const guarded = (): Guarded[] => [
    { method: 'POST', path: '/sessions/prune', body: { olderThanSeconds: 0, dryRun: true } },
    { method: 'GET', path: '/tenants' },
    { method: 'GET', path: '/quotas' },
    { method: 'GET', path: '/metrics' },
    { method: 'GET', path: '/docs' },
    { method: 'GET', path: `/sessions/${globexSession}` },
    { method: 'GET', path: `/sessions/${globexSession}/history` },
    { method: 'GET', path: `/ui/sessions/${globexSession}` },
    { method: 'GET', path: '/admin/queues/api/queues' },
    { method: 'PUT', path: '/admin/queues/api/queues/replan/pause' },
    { method: 'PUT', path: '/admin/queues/api/queues/work/rate-limit', body: { max: 1 } },
    { method: 'PATCH', path: '/admin/queues/api/queues/work/x/update-data', body: {} },
    { method: 'PUT', path: '/admin/queues/api/queues/work/clean/completed' },
    { method: 'POST', path: `/ui/sessions/${globexSession}/resume`, body: { mode: 'retry' } },
  ];

  const send = (request: Guarded, target: string, headers: Record<string, string>) =>
    rawRequest(server.url, request.method, target, headers, request.body);

  it('gives each spelling the plain answer, or reaches no route', async () => {
    const replan = new Queue('replan', { connection: client.store.redis, prefix });
    for (const request of guarded()) {
      for (const [name, headers] of Object.entries(credentials())) {
        const plain = (await send(request, request.path, headers)).status;
        const what = `${name} ${request.method} ${request.path}`;
        await fc.assert(
          fc.asyncProperty(sameRoute(request.path), async (target) => {
            expect((await send(request, target, headers)).status, `${what} as ${target}`).toBe(
              plain,
            );
          }),
          { numRuns: 6 },
        );
        await fc.assert(
          fc.asyncProperty(otherRoute(request.path), async (target) => {
            const status = (await send(request, target, headers)).status;
            expect([plain, 400, 401, 404, 405], `${what} as ${target}: ${status}`).toContain(
              status,
            );
          }),
          { numRuns: 6 },
        );
      }
    }
    // Nothing a refused spelling asked for happened.
    expect(await replan.isPaused()).toBe(false);
    expect(await client.store.loadSession(globexSession)).toBeDefined();
  }, 60_000);

  it('refuses the tenant key and the API token what the plain spellings are refused', async () => {
    // The answers the property compares against: each refusal is what the issue asks for.
    const expectations: [string, Guarded, number][] = [
      ['tenant', guarded()[0]!, 403],
      ['tenant', guarded()[5]!, 404],
      ['tenant', guarded()[8]!, 403],
      ['api', guarded()[9]!, 403],
      ['api', guarded()[10]!, 403],
      ['api', guarded()[12]!, 403],
      ['operator', guarded()[9]!, 403],
      ['operator', guarded()[12]!, 200],
      ['apiCookie', guarded()[13]!, 403],
      ['none', guarded()[0]!, 401],
    ];
    for (const [name, request, status] of expectations) {
      const res = await send(request, request.path, credentials()[name]!);
      expect(res.status, `${name} ${request.method} ${request.path}`).toBe(status);
    }
  });
});
