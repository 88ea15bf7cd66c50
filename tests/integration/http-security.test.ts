import { randomUUID } from 'node:crypto';
import { Queue } from 'bullmq';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { createClient, type OrqClient } from '../../src/producers/client.js';
import { ApiKeyStore } from '../../src/shared/store/api-keys.js';
import type { RunningHttpServer } from '../../src/producers/http/server.js';
import { bearer, serveApi } from '../support/http.js';

/** Issue 41: attacks from an API caller, each refused. */

const TOKEN = 'security-api-token-0123456789';
const OPERATOR = 'security-operator-token-9876543210';
const api = bearer(TOKEN);
const operator = bearer(OPERATOR);
const asJson = (headers: Record<string, string>) => ({
  ...headers,
  'content-type': 'application/json',
});

let client: OrqClient;
let server: RunningHttpServer;
let prefix: string;

beforeAll(async () => {
  prefix = `sec${randomUUID().slice(0, 8)}`;
  client = await createClient({
    connection: inject('redisUrl'),
    prefix,
    config: { budget: { maxTokens: 50_000 } },
  });
  server = await serveApi(client, { token: TOKEN, operatorToken: OPERATOR });
}, 30_000);

afterAll(async () => {
  await server?.close();
  await client?.close();
});

const url = (path: string) => `${server.url}${path}`;

describe('Bull Board', () => {
  it('refuses adding a job, for the API token and the operator alike', async () => {
    for (const headers of [api, operator]) {
      const res = await fetch(url('/admin/queues/api/queues/work/add'), {
        method: 'POST',
        headers: asJson(headers),
        body: JSON.stringify({ name: 'work', data: { forged: true } }),
      });
      expect(res.status).toBe(403);
      expect(await res.json()).toMatchObject({ error: 'FORBIDDEN' });
    }
    const queue = new Queue('work', { connection: client.store.redis, prefix });
    expect(await queue.count()).toBe(0);
  });

  it("refuses rewriting a job's data, pausing, emptying and obliterating a queue", async () => {
    const queue = new Queue('work', { connection: client.store.redis, prefix });
    const job = await queue.add('work', { original: true }, { delay: 60_000 });
    const id = encodeURIComponent(job.id!);
    for (const [method, path] of [
      ['PATCH', `/admin/queues/api/queues/work/${id}/update-data`],
      ['PUT', '/admin/queues/api/queues/work/pause'],
      ['PUT', '/admin/queues/api/queues/pause'],
      ['PUT', '/admin/queues/api/queues/work/empty'],
      ['PUT', '/admin/queues/api/queues/work/obliterate'],
      ['PUT', `/admin/queues/api/queues/work/${id}/promote`],
    ] as const) {
      const res = await fetch(url(path), {
        method,
        headers: asJson(operator),
        body: JSON.stringify({ jobData: { rewritten: true } }),
      });
      expect(res.status, `${method} ${path}`).toBe(403);
    }
    expect((await queue.getJob(job.id!))?.data).toEqual({ original: true });
    expect(await queue.isPaused()).toBe(false);
    await job.remove();
  });

  it('lets only the operator retry and clean', async () => {
    const refused = await fetch(url('/admin/queues/api/queues/work/clean/completed'), {
      method: 'PUT',
      headers: api,
    });
    expect(refused.status).toBe(403);
    expect(await refused.json()).toMatchObject({
      message: 'only the operator may clean jobs from Bull Board',
    });
    const cleaned = await fetch(url('/admin/queues/api/queues/work/clean/completed'), {
      method: 'PUT',
      headers: operator,
    });
    expect(cleaned.status).toBe(200);
    const retried = await fetch(url('/admin/queues/api/queues/work/retry/failed'), {
      method: 'PUT',
      headers: operator,
    });
    expect(retried.status).toBe(200);
  });

  it('shows its actions to the operator only as far as they work', async () => {
    const res = await fetch(url('/admin/queues/api/queues'), { headers: api });
    expect(res.status).toBe(200);
    const body = (await res.json()) as { queues: { readOnlyMode: boolean }[] };
    expect(body.queues.every((q) => !q.readOnlyMode)).toBe(true);
  });

  it('is read-only for everyone without an operator token', async () => {
    const plain = await serveApi(client, { token: TOKEN });
    try {
      const res = await fetch(`${plain.url}/admin/queues/api/queues/work/clean/completed`, {
        method: 'PUT',
        headers: api,
      });
      expect(res.status).toBe(403);
      const queues = (await (
        await fetch(`${plain.url}/admin/queues/api/queues`, { headers: api })
      ).json()) as { queues: { readOnlyMode: boolean }[] };
      expect(queues.queues.every((q) => q.readOnlyMode)).toBe(true);
    } finally {
      await plain.close();
    }
  });

  it('signs the operator in with a cookie that expires, and Secure only over TLS', async () => {
    const res = await fetch(url(`/admin/queues?token=${OPERATOR}`), { redirect: 'manual' });
    expect(res.status).toBe(303);
    const cookies = res.headers.getSetCookie();
    expect(cookies[0]).toMatch(/^orq_board=operator\.\d+\.[\w-]+; /);
    expect(cookies[0]).toContain('Max-Age=43200');
    expect(cookies[0]).not.toContain('Secure');
    const cookie = cookies[0]!.split(';')[0]!;
    const cleaned = await fetch(url('/admin/queues/api/queues/work/clean/completed'), {
      method: 'PUT',
      // A browser names the board's own origin on its calls (same-origin.ts).
      headers: { cookie, origin: server.url },
    });
    expect(cleaned.status).toBe(200);
    // A forged role on an API cookie does not make its holder the operator.
    const apiCookie = (
      await fetch(url(`/admin/queues?token=${TOKEN}`), { redirect: 'manual' })
    ).headers
      .getSetCookie()[0]!
      .split(';')[0]!;
    const forged = apiCookie.replace('orq_board=api.', 'orq_board=operator.');
    const refused = await fetch(url('/admin/queues/api/queues/work/clean/completed'), {
      method: 'PUT',
      headers: { cookie: forged },
    });
    expect(refused.status).toBe(401);
  });
});

describe('headers against framing and sniffing', () => {
  it('forbids framing every page and answer; pages load from this server only', async () => {
    for (const path of ['/', '/docs', '/admin/queues', '/sessions', '/healthz']) {
      const res = await fetch(url(path), { headers: api });
      expect(res.status, path).toBe(200);
      expect(res.headers.get('x-frame-options'), path).toBe('DENY');
      expect(res.headers.get('x-content-type-options'), path).toBe('nosniff');
      const csp = res.headers.get('content-security-policy') ?? '';
      expect(csp, path).toContain("frame-ancestors 'none'");
      if ((res.headers.get('content-type') ?? '').startsWith('text/html')) {
        expect(csp, path).toContain("script-src 'self'");
      } else {
        expect(csp, path).toContain("default-src 'none'");
      }
    }
    // Refusals too.
    const refused = await fetch(url('/sessions'));
    expect(refused.status).toBe(401);
    expect(refused.headers.get('x-frame-options')).toBe('DENY');
  });
});

describe('what a caller may choose (models, budget)', () => {
  const submit = (config: unknown, target = server) =>
    fetch(`${target.url}/sessions`, {
      method: 'POST',
      headers: asJson(api),
      body: JSON.stringify({ instruction: 'choose', config }),
    });

  it('refuses switching the pods onto a provider and model the operator does not use', async () => {
    const before = (await client.list()).length;
    const res = await submit({ llm: { default: { provider: 'openai', model: 'gpt-4o' } } });
    expect(res.status).toBe(403);
    const body = (await res.json()) as { error: string; message: string; hint: string };
    expect(body.error).toBe('FORBIDDEN');
    expect(body.message).toContain('config.llm.planner');
    expect(body.message).toContain('openai/gpt-4o, which this server does not offer');
    expect(body.hint).toContain('http.models');
    const judgeOnly = await submit({ llm: { judge: { provider: 'anthropic', model: 'claude' } } });
    expect(judgeOnly.status).toBe(403);
    expect(((await judgeOnly.json()) as { message: string }).message).toContain('config.llm.judge');
    expect((await client.list()).length).toBe(before);
  });

  it('lets a caller pick a model the operator offers in http.models', async () => {
    const offering = await serveApi(client, {
      token: TOKEN,
      offeredModels: ['openai/gpt-4o-mini'],
    });
    try {
      const picked = await submit(
        { llm: { worker: { provider: 'openai', model: 'gpt-4o-mini' } } },
        offering,
      );
      expect(picked.status).toBe(201);
      const other = await submit(
        { llm: { worker: { provider: 'openai', model: 'gpt-4o' } } },
        offering,
      );
      expect(other.status).toBe(403);
    } finally {
      await offering.close();
    }
  });

  it("refuses raising the operator's budget, and its prices; lowering it is fine", async () => {
    const raised = await submit({ budget: { maxTokens: 50_001 } });
    expect(raised.status).toBe(403);
    expect(((await raised.json()) as { message: string }).message).toContain(
      'budget.maxTokens may only be lowered: 50001 is over',
    );
    const priced = await submit({
      budget: { prices: { builtin: { inputPerMTok: 0, outputPerMTok: 0 } } },
    });
    expect(priced.status).toBe(403);
    const lowered = await submit({ budget: { maxTokens: 10_000 } });
    expect(lowered.status).toBe(201);
    // Nor through a resume: a budget above the operator's is refused before the session is read.
    const { id } = (await lowered.json()) as { id: string };
    const resume = (headers: Record<string, string>) =>
      fetch(url(`/sessions/${id}/resume`), {
        method: 'POST',
        headers: asJson(headers),
        body: JSON.stringify({ budget: { maxTokens: 1_000_000 } }),
      });
    const raisedByResume = await resume(api);
    expect(raisedByResume.status).toBe(403);
    expect(((await raisedByResume.json()) as { message: string }).message).toContain(
      "budget.maxTokens above this server's 50000",
    );
    // The operator may (the session is not out of budget, so that is what it says).
    expect((await resume(operator)).status).toBe(409);
  });
});

describe('a config nested without end', () => {
  it('answers 400 naming the config, not 500', async () => {
    // Written as text: JSON.stringify itself overflows on an object this deep.
    const depth = 100_000;
    const config = `${'{"a":'.repeat(depth)}1${'}'.repeat(depth)}`;
    const res = await fetch(url('/sessions'), {
      method: 'POST',
      headers: asJson(api),
      body: `{"instruction":"deep","config":${config}}`,
    });
    expect(res.status).toBe(400);
    const body = (await res.json()) as { error: string; message: string };
    expect(body.error).toBe('VALIDATION_FAILED');
    expect(body.message).toContain('config: nests deeper than 32 levels');
  });
});

describe("tenants' API keys", () => {
  let acme: string;
  let globex: string;
  let acmeId: string;
  const as = (key: string) => bearer(key);
  const submitAs = (key: string, body: unknown) =>
    fetch(url('/sessions'), {
      method: 'POST',
      headers: asJson(as(key)),
      body: JSON.stringify(body),
    });

  beforeAll(async () => {
    const keys = new ApiKeyStore(client.store.redis, prefix);
    const created = await keys.create('acme', 'ci');
    acme = created.key;
    acmeId = created.record.id;
    globex = (await keys.create('globex')).key;
  });

  it('keeps only hashes in Redis, and lists keys without them', async () => {
    const dump = JSON.stringify(await client.store.redis.hgetall(`${prefix}:apikeys:byhash`));
    expect(dump).not.toContain(acme.slice(-20));
    const listed = await new ApiKeyStore(client.store.redis, prefix).list();
    expect(listed.map((r) => r.tenant)).toEqual(['acme', 'globex']);
    expect(JSON.stringify(listed)).not.toContain(acme.slice(-20));
  });

  it("submits for its own tenant and sees, cancels and resumes only that tenant's sessions", async () => {
    const mine = await submitAs(acme, { instruction: 'acme work', idempotencyKey: 'k1' });
    expect(mine.status).toBe(201);
    const session = (await mine.json()) as { id: string; tenant: string };
    expect(session.tenant).toBe('acme');
    const theirs = await submitAs(globex, { instruction: 'globex work', idempotencyKey: 'k1' });
    // The same idempotency key in another tenant is another session, not a 409 naming acme's.
    expect(theirs.status).toBe(201);
    const other = (await theirs.json()) as { id: string };
    expect(other.id).not.toBe(session.id);

    for (const [method, path] of [
      ['GET', `/sessions/${session.id}`],
      ['GET', `/sessions/${session.id}/history`],
      ['GET', `/sessions/${session.id}/result`],
      ['POST', `/sessions/${session.id}/cancel`],
      ['POST', `/sessions/${session.id}/resume`],
      ['DELETE', `/sessions/${session.id}`],
    ] as const) {
      const res = await fetch(url(path), { method, headers: as(globex) });
      expect(res.status, `${method} ${path}`).toBe(404);
    }
    expect((await fetch(url(`/sessions/${session.id}`), { headers: as(acme) })).status).toBe(200);
    const listed = (await (await fetch(url('/sessions'), { headers: as(globex) })).json()) as {
      tenant: string;
    }[];
    expect(listed.length).toBeGreaterThan(0);
    expect(listed.every((s) => s.tenant === 'globex')).toBe(true);
    // The API token still sees every tenant.
    expect((await fetch(url(`/sessions/${session.id}`), { headers: api })).status).toBe(200);
  });

  it('refuses submitting for another tenant, and the routes about every tenant', async () => {
    const foreign = await submitAs(acme, { instruction: 'x', tenant: 'globex' });
    expect(foreign.status).toBe(403);
    for (const path of ['/tenants', '/quotas', '/metrics', '/admin/queues/api/queues', '/docs']) {
      expect((await fetch(url(path), { headers: as(acme) })).status, path).toBe(403);
    }
    const prune = await fetch(url('/sessions/prune'), {
      method: 'POST',
      headers: asJson(as(acme)),
      body: JSON.stringify({ olderThanSeconds: 1 }),
    });
    expect(prune.status).toBe(403);
  });

  it('stops working once revoked; a made-up key never works', async () => {
    await new ApiKeyStore(client.store.redis, prefix).revoke(acmeId);
    expect((await fetch(url('/sessions'), { headers: as(acme) })).status).toBe(401);
    const forged = `orq_${acmeId}_${'A'.repeat(43)}`;
    expect((await fetch(url('/sessions'), { headers: as(forged) })).status).toBe(401);
  });
});
