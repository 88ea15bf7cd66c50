import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { createClient, type OrqClient } from '../../src/producers/client.js';
import type { RunningHttpServer } from '../../src/producers/http/server.js';
import type { Session } from '../../src/shared/domain/session.js';
import { ApiKeyStore } from '../../src/shared/store/api-keys.js';
import { SessionIndex, type ListCursor } from '../../src/shared/store/session-index.js';
import { bearer, serveApi } from '../support/http.js';

/** Issue 41: a tenant's key pages through exactly its own sessions, in full pages. */

const TOKEN = 'paging-api-token-0123456789';
const LIMIT = 7;

let client: OrqClient;
let server: RunningHttpServer;
let prefix: string;
let acmeKey: string;
const sessions: Session[] = [];

beforeAll(async () => {
  prefix = `page${randomUUID().slice(0, 8)}`;
  client = await createClient({ connection: inject('redisUrl'), prefix });
  server = await serveApi(client, { token: TOKEN });
  acmeKey = (await new ApiKeyStore(client.store.redis, prefix).create('acme')).key;
  // One acme session to every three of globex: a page of all sessions holds few of acme's, and
  // many share a creation millisecond, so ties in the index are paged through too.
  for (let i = 0; i < 88; i += 1) {
    const tenant = i % 4 === 0 ? 'acme' : 'globex';
    sessions.push(await client.submit({ instruction: `work ${i} of ${tenant}`, tenant }));
  }
}, 60_000);

afterAll(async () => {
  await server?.close();
  await client?.close();
});

/** The sessions of `tenant` in listing order: newest first, then by id (as Redis orders ties). */
function expected(tenant: string): string[] {
  return sessions
    .filter((s) => s.tenant === tenant)
    .sort((a, b) => Date.parse(b.createdAt) - Date.parse(a.createdAt) || (a.id < b.id ? 1 : -1))
    .map((s) => s.id);
}

/** Every page of a listing, following its Link header; `between` runs after the first page. */
async function pages(
  path: string,
  headers: Record<string, string>,
  between?: () => Promise<void>,
): Promise<string[][]> {
  const out: string[][] = [];
  let next: string | undefined = path;
  while (next) {
    const res = await fetch(`${server.url}${next}`, { headers });
    expect(res.status).toBe(200);
    out.push(((await res.json()) as Session[]).map((s) => s.id));
    next = /^<([^>]+)>; rel="next"$/.exec(res.headers.get('link') ?? '')?.[1];
    if (out.length === 1) await between?.();
    expect(out.length).toBeLessThan(50);
  }
  return out;
}

const sizes = (listing: string[][]) => listing.map((page) => page.length);
const fullPages = (count: number) => [
  ...Array<number>(Math.floor(count / LIMIT)).fill(LIMIT),
  ...(count % LIMIT ? [count % LIMIT] : []),
];

describe('GET /sessions for a tenant', () => {
  it("pages through exactly the key's tenant's sessions, every page full", async () => {
    const want = expected('acme');
    expect(want).toHaveLength(22);
    const listing = await pages(`/sessions?limit=${LIMIT}`, {
      authorization: `Bearer ${acmeKey}`,
    });
    expect(sizes(listing)).toEqual(fullPages(want.length));
    expect(listing.flat()).toEqual(want);
  });

  it('continues where the page ended when sessions are submitted meanwhile', async () => {
    const want = expected('globex');
    const listing = await pages(
      `/sessions?limit=${LIMIT}&tenant=globex`,
      bearer(TOKEN),
      async () => {
        // Newer than every page: offsets would shift by these, the cursor does not.
        for (let i = 0; i < 3; i += 1) {
          await client.submit({ instruction: `late ${i}`, tenant: 'globex' });
        }
      },
    );
    expect(listing.flat()).toEqual(want);
    expect(sizes(listing)).toEqual(fullPages(want.length));
  });

  it('lists sessions stored before the tenant indexes existed, building them once', async () => {
    const { redis } = client.store;
    await redis.del(
      `${prefix}:tenant-sessions:acme`,
      `${prefix}:tenant-sessions:globex`,
      `${prefix}:tenant-sessions-built`,
    );
    // The running server builds them on its next tenant listing, as an upgraded one would.
    const listing = await pages(`/sessions?limit=${LIMIT}`, {
      authorization: `Bearer ${acmeKey}`,
    });
    expect(listing.flat()).toEqual(expected('acme'));
    expect(sizes(listing)).toEqual(fullPages(expected('acme').length));
    expect(await redis.exists(`${prefix}:tenant-sessions-built`)).toBe(1);
    // The typed client pages the same way.
    const first = await client.listPage({ tenant: 'acme', limit: LIMIT });
    const second = await client.listPage({ tenant: 'acme', limit: LIMIT, after: first.next! });
    expect([...first.sessions, ...second.sessions].map((s) => s.id)).toEqual(
      expected('acme').slice(0, 2 * LIMIT),
    );
  });

  it("refuses a tenant's key asking for another tenant's sessions, and a malformed cursor", async () => {
    const headers = bearer(acmeKey);
    const other = await fetch(`${server.url}/sessions?tenant=globex`, { headers });
    expect(other.status).toBe(403);
    const bad = await fetch(`${server.url}/sessions?after=not-a-cursor`, { headers });
    expect(bad.status).toBe(400);
  });
});

describe('the session index', () => {
  it("drops a deleted session from its tenant's index", async () => {
    const { id } = await client.submit({ instruction: 'short-lived', tenant: 'initech' });
    const { session, version } = await client.store.requireSession(id);
    await client.store.apply(id, {
      eventId: `test-cancel|${id}`,
      session: { record: { ...session, state: 'CANCELLED' }, expectedVersion: version },
    });
    const key = `${prefix}:tenant-sessions:initech`;
    expect(await client.store.redis.zscore(key, id)).not.toBeNull();
    await client.delete(id);
    expect(await client.store.redis.zscore(key, id)).toBeNull();
  });

  it("pages through sessions of one millisecond by id, also when the cursor's own entry is gone", async () => {
    const index = new SessionIndex(client.store.redis, `${prefix}ties`);
    const createdAt = new Date().toISOString();
    const ids = Array.from({ length: 10 }, (_, i) => `s${String(i).padStart(2, '0')}`);
    for (const id of ids) await index.add({ id, tenant: 'ties', createdAt });
    const seen: string[] = [];
    let after: ListCursor | undefined;
    for (let round = 0; round < 10 && seen.length < ids.length; round += 1) {
      const page = await index.page({ limit: 3, tenant: 'ties', ...(after ? { after } : {}) });
      seen.push(...page.map((entry) => entry.id));
      after = page.at(-1);
      // The cursor names a position, not an entry: deleting it changes nothing after it.
      if (after) await index.remove(after.id, 'ties');
    }
    expect(seen).toEqual([...ids].reverse());
  });
});
