import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { createClient, type OrqClient } from '../../src/producers/client.js';
import type { RunningHttpServer } from '../../src/producers/http/server.js';
import { serveApi } from '../support/http.js';

const TOKEN = 'docs-token-0123456789abcdef';

let client: OrqClient;
let server: RunningHttpServer;

beforeAll(async () => {
  client = await createClient({
    connection: inject('redisUrl'),
    prefix: `doc${randomUUID().slice(0, 8)}`,
  });
  server = await serveApi(client, { token: TOKEN });
}, 30_000);

afterAll(async () => {
  await server?.close();
  await client?.close();
});

const url = (path: string) => `${server.url}${path}`;

/** The cookie `GET /docs?token=…` sets, as a browser would send it back on /docs. */
async function signIn(): Promise<{ cookie: string; response: Response }> {
  const response = await fetch(url(`/docs?token=${TOKEN}`), { redirect: 'manual' });
  const pair = response.headers.getSetCookie()[0]?.split(';')[0] ?? '';
  return { cookie: pair, response };
}

/** The `src` of every script and the `href` of every stylesheet and icon of a page. */
function assetsOf(html: string): string[] {
  return [...html.matchAll(/<(?:script|link)\b[^>]*?\b(?:src|href)="([^"]+)"/g)].map(
    (match) => match[1] ?? '',
  );
}

describe('the index at /', () => {
  it('links the session view, the API reference, Bull Board, the OpenAPI document and /metrics, without a token', async () => {
    const res = await fetch(url('/'));
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toContain('text/html');
    const html = await res.text();
    for (const path of ['/ui', '/docs', '/admin/queues', '/openapi.json', '/metrics']) {
      expect(html).toContain(`<a href="${path}">`);
    }
    // How to sign in, with the placeholder, never the token itself.
    expect(html).toContain('/ui?token=&lt;ORQ_API_TOKEN&gt;');
    expect(html).not.toContain(TOKEN);
  });
});

describe('the API reference at /docs', () => {
  it('is refused without the token, with the way to open it', async () => {
    const res = await fetch(url('/docs'));
    expect(res.status).toBe(401);
    expect(await res.json()).toMatchObject({
      error: 'UNAUTHORIZED',
      hint: expect.stringContaining('Open /docs?token=<ORQ_API_TOKEN> once') as string,
    });
    expect((await fetch(url('/docs?token=wrong'), { redirect: 'manual' })).status).toBe(401);
  });

  it('opens with ?token= once, then with the cookie it sets, the token gone from the address', async () => {
    const { cookie, response } = await signIn();
    expect(response.status).toBe(303);
    expect(response.headers.get('location')).toBe('/docs');
    // One cookie for the browser pages, each scoped to its own path.
    const scopes = response.headers.getSetCookie().map((c) => /Path=([^;]+)/.exec(c)?.[1]);
    expect(scopes).toEqual(['/admin/queues', '/docs', '/ui']);

    const page = await fetch(url('/docs'), { headers: { cookie } });
    expect(page.status).toBe(200);
    expect(page.headers.get('content-type')).toContain('text/html');
    expect(await page.text()).toContain('<div id="swagger-ui">');
    const board = await fetch(url('/admin/queues'), { headers: { cookie } });
    expect(board.status).toBe(200);
    // The cookie opens the browser pages only: the API still wants the bearer header.
    expect((await fetch(url('/sessions'), { headers: { cookie } })).status).toBe(401);
  });

  it('loads its scripts and styles from this server, none from another site', async () => {
    const { cookie } = await signIn();
    const html = await (await fetch(url('/docs'), { headers: { cookie } })).text();
    const assets = assetsOf(html);
    expect(assets.filter((asset) => asset.endsWith('.js'))).toHaveLength(3);
    expect(assets.filter((asset) => asset.endsWith('.css')).length).toBeGreaterThan(0);
    for (const asset of assets) {
      expect(asset, asset).toMatch(/^\/docs\//);
      const res = await fetch(url(asset), { headers: { cookie } });
      expect(res.status, asset).toBe(200);
      expect((await res.arrayBuffer()).byteLength, asset).toBeGreaterThan(0);
    }
    expect(html).not.toMatch(/(?:src|href)="(?:https?:)?\/\//);
    // The spec the page reads, and no online validator it would call.
    const initializer = await (
      await fetch(url('/docs/static/swagger-initializer.js'), { headers: { cookie } })
    ).text();
    expect(initializer).toContain('validatorUrl: null');
    const spec = (await (await fetch(url('/docs/json'), { headers: { cookie } })).json()) as {
      paths: Record<string, unknown>;
    };
    expect(Object.keys(spec.paths)).toContain('/sessions');
    // The reference documents the API, not its own pages.
    expect(Object.keys(spec.paths).filter((path) => path.startsWith('/docs'))).toEqual([]);
  });
});
