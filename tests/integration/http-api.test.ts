import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { createClient } from '../../src/producers/client.js';
import { HistoryEntry } from '../../src/shared/domain/history.js';
import { OrqError } from '../../src/shared/errors.js';
import { startTestRedis } from '../support/test-redis.js';
import { startHttpServer, type RunningHttpServer } from '../../src/producers/http/server.js';
import { parseSseStream, type SseEvent } from '../../src/producers/http/sse.js';
import { startCluster, type TestCluster } from '../support/cluster.js';
import { root } from '../support/cli.js';
import { bearer, serveApi } from '../support/http.js';

const packageVersion = (
  JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as {
    version: string;
  }
).version;

const TOKEN = 'test-token-0123456789abcdef';
const auth = bearer(TOKEN);
const json = { ...auth, 'content-type': 'application/json' };

let cluster: TestCluster;
let server: RunningHttpServer;

beforeAll(async () => {
  cluster = await startCluster();
  server = await serveApi(cluster.client, { token: TOKEN });
}, 30_000);

afterAll(async () => {
  await server?.close();
  await cluster?.close();
});

const url = (path: string) => `${server.url}${path}`;

async function submit(body: unknown): Promise<Response> {
  return fetch(url('/sessions'), { method: 'POST', headers: json, body: JSON.stringify(body) });
}

/** Polls until `check` returns a value, or fails after `timeoutMs`. */
async function waitFor<T>(
  check: () => Promise<T | undefined>,
  what: string,
  timeoutMs = 20_000,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

type View = {
  session: { id: string; state: string };
  tasks: { id: string; state: string }[];
  counters: { open: number; active: number };
  usage: { total: { calls: number }; byTask: Record<string, unknown> };
  progress: Record<string, unknown>;
  queued: string[];
};

async function waitForState(id: string, state: string): Promise<View> {
  return waitFor(async () => {
    const res = await fetch(url(`/sessions/${id}`), { headers: auth });
    const view = (await res.json()) as View;
    return view.session?.state === state ? view : undefined;
  }, `session ${id} to be ${state}`);
}

/** Stream ids `ms-seq` in numeric order. */
function compareStreamIds(a: string, b: string): number {
  const [am, as] = a.split('-').map(BigInt);
  const [bm, bs] = b.split('-').map(BigInt);
  if (am !== bm) return am! < bm! ? -1 : 1;
  return as === bs ? 0 : as! < bs! ? -1 : 1;
}

async function readEvents(id: string, headers: Record<string, string> = {}): Promise<SseEvent[]> {
  const res = await fetch(url(`/sessions/${id}/events`), { headers: { ...auth, ...headers } });
  expect(res.status).toBe(200);
  expect(res.headers.get('content-type')).toMatch(/^text\/event-stream/);
  return parseSseStream(await res.text());
}

describe('HTTP API auth', () => {
  it('refuses a request without a token or with a wrong one, and accepts the right one', async () => {
    const none = await fetch(url('/sessions'));
    expect(none.status).toBe(401);
    expect(((await none.json()) as { error: string }).error).toBe('UNAUTHORIZED');

    const wrong = await fetch(url('/sessions'), { headers: { authorization: 'Bearer nope' } });
    expect(wrong.status).toBe(401);

    const right = await fetch(url('/sessions'), { headers: auth });
    expect(right.status).toBe(200);
  });

  it('answers /healthz and /readyz without a token', async () => {
    const health = await fetch(url('/healthz'));
    expect(health.status).toBe(200);
    const ready = await fetch(url('/readyz'));
    expect(ready.status).toBe(200);
    expect(await ready.json()).toEqual({ status: 'ok', redis: 'up' });
  });

  it('refuses to listen on a non-loopback address without a token', async () => {
    const attempt = startHttpServer({ client: cluster.client, host: '0.0.0.0', port: 0 });
    await expect(attempt).rejects.toBeInstanceOf(OrqError);
    await expect(attempt).rejects.toThrow(/ORQ_API_TOKEN/);
  });
});

describe('sessions over HTTP', () => {
  it('creates a session that completes, and shows it with its tasks', async () => {
    const res = await submit({ instruction: '認証機能とバリデーションを実装して' });
    expect(res.status).toBe(201);
    const session = (await res.json()) as { id: string; state: string };
    expect(session.state).toBe('PLANNING');

    const view = await waitForState(session.id, 'COMPLETED');
    expect(view.tasks.length).toBeGreaterThanOrEqual(2);
    expect(view.tasks.every((t) => t.state === 'DONE')).toBe(true);
    expect(view.counters).toEqual({ open: 0, active: 0 });
    // The usage is in the view, as `orq status` shows it; no task runs, so nothing reports.
    expect(view.usage.total.calls).toBeGreaterThan(view.tasks.length);
    expect(Object.keys(view.usage.byTask).sort()).toEqual(view.tasks.map((t) => t.id).sort());
    expect(view.progress).toEqual({});
    expect(view.queued).toEqual([]);

    const list = await fetch(url('/sessions?limit=50'), { headers: auth });
    expect(((await list.json()) as { id: string }[]).map((s) => s.id)).toContain(session.id);
  });

  it('marks a session the builtin provider ran, a scenario-scripted one too, and documents the mark', async () => {
    const scripted = await cluster.client.submit({
      instruction: 'Add a search feature',
      config: { llm: { scenario: resolve(root, 'examples/scenarios/diamond.yaml') } },
    });
    const plain = (await (await submit({ instruction: 'Implement login' })).json()) as {
      id: string;
    };
    for (const id of [scripted.id, plain.id]) {
      const view = (await (await fetch(url(`/sessions/${id}`), { headers: auth })).json()) as {
        ranByBuiltin: boolean;
        builtinRoles: string[];
      };
      expect(view, id).toMatchObject({
        ranByBuiltin: true,
        builtinRoles: ['planner', 'judge', 'worker', 'replanner'],
      });
    }
    const doc = (await (await fetch(url('/openapi.json'), { headers: auth })).json()) as {
      components: { schemas: Record<string, { properties?: Record<string, unknown> }> };
    };
    expect(doc.components.schemas.SessionView?.properties).toHaveProperty('ranByBuiltin');
    expect(doc.components.schemas.SessionResult?.properties).toHaveProperty('ranByBuiltin');
  });

  it('answers 400 naming the field for an empty instruction', async () => {
    const res = await submit({ instruction: '   ' });
    expect(res.status).toBe(400);
    const body = (await res.json()) as { error: string; issues: { path: string }[] };
    expect(body.error).toBe('VALIDATION_FAILED');
    expect(body.issues.map((i) => i.path)).toContain('instruction');
  });

  it('answers 400 naming an unknown config key and an unknown request key', async () => {
    const badConfig = await submit({
      instruction: 'x',
      config: { refinement: { noiseTreshold: 4 } },
    });
    expect(badConfig.status).toBe(400);
    const configBody = (await badConfig.json()) as { error: string; message: string };
    expect(configBody.error).toBe('VALIDATION_FAILED');
    expect(configBody.message).toContain('config.refinement.noiseTreshold');

    const badKey = await submit({ instruction: 'x', urgency: 3 });
    expect(badKey.status).toBe(400);
    expect(((await badKey.json()) as { message: string }).message).toContain('"urgency"');
  });

  it('takes a tenant and a priority with the submit, and shows the tenant’s load', async () => {
    const created = await submit({ instruction: 'Write the README', tenant: 'acme', priority: 8 });
    expect(created.status).toBe(201);
    expect(await created.json()).toMatchObject({ tenant: 'acme', priority: 8 });
    const out = await submit({ instruction: 'x', priority: 10 });
    expect(out.status).toBe(400);
    expect(((await out.json()) as { message: string }).message).toContain('priority');
    const tenants = await fetch(url('/tenants'), { headers: auth });
    expect(tenants.status).toBe(200);
    expect(await tenants.json()).toMatchObject({ tenants: expect.any(Array) });
  });

  it('answers 403 naming each setting a caller may not set, and claims no idempotency key', async () => {
    const key = `guarded-${Date.now()}`;
    const refused = await submit({
      instruction: 'run my program',
      idempotencyKey: key,
      config: {
        execution: {
          // providerKeys would hand the pod's keys to the program: refused with the rest.
          command: { template: ['id'], repository: '.', providerKeys: ['OPENAI_API_KEY'] },
        },
        llm: {
          judge: { model: 'judge-model', baseUrl: 'http://attacker.example', apiKeyEnv: 'HOME' },
        },
      },
    });
    expect(refused.status).toBe(403);
    const body = (await refused.json()) as { error: string; message: string; hint: string };
    expect(body.error).toBe('FORBIDDEN');
    for (const path of [
      'config.execution.command.template',
      'config.execution.command.repository',
      'config.execution.command.providerKeys',
      'config.llm.judge.baseUrl',
      'config.llm.judge.apiKeyEnv',
    ]) {
      expect(body.message).toContain(path);
    }
    // The model is a setting callers may choose.
    expect(body.message).not.toContain('config.llm.judge.model');
    expect(body.hint).toContain('http.sessionOverrides');

    // Nothing was kept of the refused request: the same key with allowed settings creates.
    const allowed = await submit({
      instruction: 'run my program',
      idempotencyKey: key,
      config: { refinement: { noiseThreshold: 4 }, llm: { judge: { temperature: 0.5 } } },
    });
    expect(allowed.status).toBe(201);
    const session = (await allowed.json()) as { id: string; config: { llm: { judge: unknown } } };
    expect(session.config.llm.judge).toEqual({ temperature: 0.5 });
    // An unknown key is still a 400 that names it, not a 403.
    const typo = await submit({ instruction: 'x', config: { execution: { comand: {} } } });
    expect(typo.status).toBe(400);
    expect(((await typo.json()) as { message: string }).message).toContain('execution.comand');
  });

  it('lets a caller set every setting when the operator allows it (sessionOverrides ["*"])', async () => {
    const open = await serveApi(cluster.client, { sessionOverrides: ['*'] });
    try {
      const res = await fetch(`${open.url}/sessions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({
          instruction: 'operator-trusted caller',
          config: { llm: { default: { baseUrl: 'http://127.0.0.1:9' } } },
        }),
      });
      expect(res.status).toBe(201);
    } finally {
      await open.close();
    }
  });

  it('answers 404 for an unknown session on every session route', async () => {
    const id = 'no-such-session';
    for (const path of [`/sessions/${id}`, `/sessions/${id}/history`, `/sessions/${id}/events`]) {
      const res = await fetch(url(path), { headers: auth });
      expect(res.status, path).toBe(404);
      const body = (await res.json()) as { error: string; message: string; hint?: string };
      expect(body.error).toBe('NOT_FOUND');
      // The hint is a field of its own, not repeated in the message.
      expect(body.message).toBe(`Session ${id} not found`);
      expect(body.hint).toContain('orq status');
      expect(body.hint).toContain('GET /sessions');
    }
    const cancel = await fetch(url(`/sessions/${id}/cancel`), { method: 'POST', headers: auth });
    expect(cancel.status).toBe(404);
    const deleted = await fetch(url(`/sessions/${id}`), { method: 'DELETE', headers: auth });
    expect(deleted.status).toBe(404);
  });

  it('deletes a finished session (200), after which it is not found (404)', async () => {
    const res = await submit({ instruction: 'something to delete' });
    const { id } = (await res.json()) as { id: string };
    await waitForState(id, 'COMPLETED');
    const deleted = await fetch(url(`/sessions/${id}`), { method: 'DELETE', headers: auth });
    expect(deleted.status).toBe(200);
    expect(await deleted.json()).toEqual({ sessionId: id, state: 'COMPLETED' });
    expect((await fetch(url(`/sessions/${id}`), { headers: auth })).status).toBe(404);
    const again = await fetch(url(`/sessions/${id}`), { method: 'DELETE', headers: auth });
    expect(again.status).toBe(404);
  });

  it('lists what a prune would delete (dry run), and answers 400 for a bad prune', async () => {
    const res = await submit({ instruction: 'something to prune' });
    const { id } = (await res.json()) as { id: string };
    await waitForState(id, 'COMPLETED');
    await new Promise((r) => setTimeout(r, 10));
    const dry = await fetch(url('/sessions/prune'), {
      method: 'POST',
      headers: json,
      body: JSON.stringify({ olderThanSeconds: 0, dryRun: true }),
    });
    expect(dry.status).toBe(200);
    const report = (await dry.json()) as { dryRun: boolean; deleted: string[] };
    expect(report.dryRun).toBe(true);
    expect(report.deleted).toContain(id);
    expect((await fetch(url(`/sessions/${id}`), { headers: auth })).status).toBe(200);
    for (const body of [{ olderThanSeconds: -1 }, { olderThanSeconds: 0, states: ['RUNNING'] }]) {
      const bad = await fetch(url('/sessions/prune'), {
        method: 'POST',
        headers: json,
        body: JSON.stringify(body),
      });
      expect(bad.status, JSON.stringify(body)).toBe(400);
      expect(((await bad.json()) as { error: string }).error).toBe('VALIDATION_FAILED');
    }
  });

  it('refuses a query parameter given twice, naming it, on every route that takes a query', async () => {
    const res = await fetch(url('/sessions'), {
      method: 'POST',
      headers: json,
      body: JSON.stringify({ instruction: 'Write a haiku' }),
    });
    const { id } = (await res.json()) as { id: string };
    const paths = [
      '/sessions?limit=1&limit=2',
      `/sessions/${id}/history?format=json&format=jsonl`,
      `/sessions/${id}/events?after=1-0&after=2-0`,
    ];
    for (const path of paths) {
      const answer = await fetch(url(path), { headers: auth });
      expect(answer.status, path).toBe(400);
      const body = (await answer.json()) as { error: string; issues: unknown[] };
      expect(body.error, path).toBe('VALIDATION_FAILED');
      expect(body.issues, path).toEqual([
        {
          path: expect.stringMatching(/^(limit|format|after)$/),
          message: 'given 2 times; give it once',
        },
      ]);
    }
    // Once is fine, and a route without a query schema of orq's is left alone.
    expect((await fetch(url('/sessions?limit=1'), { headers: auth })).status).toBe(200);
  });

  it('answers 405 with Allow for a method a path does not take, 404 for a path that is not there', async () => {
    const cases: [string, string, string][] = [
      ['PATCH', '/sessions/some-id', 'DELETE, GET, HEAD'],
      ['PUT', '/sessions', 'GET, HEAD, POST'],
      ['GET', '/sessions/some-id/cancel', 'POST'],
      ['POST', '/healthz', 'GET, HEAD'],
      // These reach GET/DELETE /sessions/:id, which find no session "prune".
      ['GET', '/sessions/prune', 'POST'],
      ['DELETE', '/sessions/prune', 'POST'],
    ];
    for (const [method, path, allow] of cases) {
      const res = await fetch(url(path), { method, headers: auth });
      expect(res.status, `${method} ${path}`).toBe(405);
      expect(res.headers.get('allow'), `${method} ${path}`).toBe(allow);
      const body = (await res.json()) as { error: string; message: string; hint?: string };
      expect(body).toEqual({
        error: 'METHOD_NOT_ALLOWED',
        message: `${path} does not take ${method}`,
        hint: `Use ${allow}.`,
      });
    }
    const missing = await fetch(url('/sessions/some-id/pause'), { method: 'POST', headers: auth });
    expect(missing.status).toBe(404);
    expect(missing.headers.get('allow')).toBeNull();
    expect(((await missing.json()) as { message: string }).message).toBe(
      'no route POST /sessions/some-id/pause',
    );
  });

  it("answers Fastify's own client errors in orq's error format", async () => {
    // A session id of the longest valid form is looked up, not refused by the router.
    const longest = await fetch(url(`/sessions/${'a'.repeat(128)}`), { headers: auth });
    expect(longest.status).toBe(404);
    expect(((await longest.json()) as { error: string }).error).toBe('NOT_FOUND');

    const post = (body: string, type: string) =>
      fetch(url('/sessions'), { method: 'POST', headers: { ...auth, 'content-type': type }, body });
    const cases = [
      [await post('{"instruction": ', 'application/json'), 400, 'VALIDATION_FAILED'],
      [await post('<session/>', 'application/xml'), 415, 'UNSUPPORTED_MEDIA_TYPE'],
      [await post('{"instruction":"x"}', 'text/plain'), 415, 'UNSUPPORTED_MEDIA_TYPE'],
      [
        await post(`{"instruction":"${'x'.repeat(1_100_000)}"}`, 'application/json'),
        413,
        'PAYLOAD_TOO_LARGE',
      ],
    ] as const;
    for (const [res, status, error] of cases) {
      expect(res.status).toBe(status);
      const body = (await res.json()) as { error: string; message: string; hint?: string };
      expect(body.error).toBe(error);
      expect(body.message).not.toBe('');
      expect(body.hint).toBeDefined();
    }
  });

  it('takes an empty body sent as JSON as no body: cancel and resume need none, a submit names it', async () => {
    const { id } = (await (await submit({ instruction: 'empty bodies' })).json()) as { id: string };
    await waitForState(id, 'COMPLETED');
    const post = (path: string) => fetch(url(path), { method: 'POST', headers: json, body: '' });
    // Past the body, to the session's state: a finished session is neither cancelled nor resumed.
    for (const action of ['cancel', 'resume']) {
      const res = await post(`/sessions/${id}/${action}`);
      expect(res.status, action).toBe(409);
      expect(((await res.json()) as { error: string }).error, action).toBe('INVALID_STATE');
    }
    const res = await post('/sessions');
    expect(res.status).toBe(400);
    expect(await res.json()).toMatchObject({
      error: 'VALIDATION_FAILED',
      message: 'Invalid body: expected an object, got null',
      issues: [{ path: '(root)', message: 'expected an object, got null' }],
    });
  });

  it('refuses a session id over 128 characters naming it, and lets Bull Board take longer job ids', async () => {
    const res = await fetch(url(`/sessions/${'a'.repeat(129)}/history`), { headers: auth });
    expect(res.status).toBe(400);
    expect(await res.json()).toMatchObject({
      error: 'VALIDATION_FAILED',
      issues: [{ path: 'id', message: 'a session id has at most 128 characters' }],
    });
    // A job id of a long task id: Bull Board's route answers, not the router's length limit.
    const job = await fetch(url(`/admin/queues/api/queues/work/${'j'.repeat(300)}`), {
      headers: auth,
    });
    expect(JSON.stringify(await job.json())).not.toContain('path parameter longer');
  });

  it("answers the router's URL errors in orq's error format, with no Fastify code", async () => {
    const cases = [
      // A path parameter past the router's 512 characters, refused before any route.
      [`/sessions/${'a'.repeat(600)}`, /at most 128 characters/],
      // Not valid percent-encoding: %ZZ decodes to nothing.
      ['/sessions/%ZZ', /percent-encode/i],
      ['/healthz%E0%A4%A', /percent-encode/i],
    ] as const;
    for (const [path, hint] of cases) {
      const res = await fetch(url(path), { headers: auth });
      const text = await res.text();
      expect(res.status, `${path} -> ${text}`).toBe(400);
      const body = JSON.parse(text) as Record<string, unknown>;
      expect(Object.keys(body).sort(), text).toEqual(['error', 'hint', 'message']);
      expect(body.error).toBe('VALIDATION_FAILED');
      expect(body.message).not.toMatch(/FST_ERR/);
      expect(body.hint).toMatch(hint);
    }
  });

  it('gives the same session for the same idempotency key (201, then 200)', async () => {
    const key = `idem-${Date.now()}`;
    const request = {
      instruction: 'write the docs',
      idempotencyKey: key,
      config: { refinement: { noiseThreshold: 4, maxRefinementAttempts: 2 } },
      metadata: { ticket: '42', team: 'docs' },
    };
    const first = await submit(request);
    // The same request, its keys in another order: a retry.
    const second = await submit({
      metadata: { team: 'docs', ticket: '42' },
      config: { refinement: { maxRefinementAttempts: 2, noiseThreshold: 4 } },
      idempotencyKey: key,
      instruction: 'write the docs',
    });
    expect(first.status).toBe(201);
    expect(second.status).toBe(200);
    const a = (await first.json()) as { id: string };
    const b = (await second.json()) as { id: string };
    expect(b.id).toBe(a.id);
    // The key names that request: another instruction under it is refused, not answered with it.
    const other = await submit({ instruction: 'write the changelog', idempotencyKey: key });
    expect(other.status).toBe(409);
    expect(await other.json()).toMatchObject({
      error: 'CONFLICT',
      message: expect.stringContaining(`was used for another instruction (session ${a.id})`),
    });
    // So are other settings or metadata: answering with the old session would drop them.
    for (const changed of [
      { ...request, config: { refinement: { noiseThreshold: 9, maxRefinementAttempts: 2 } } },
      { ...request, config: undefined },
      { ...request, metadata: { ticket: '43', team: 'docs' } },
    ]) {
      const res = await submit(changed);
      expect(res.status).toBe(409);
      expect(((await res.json()) as { message: string }).message).toContain(
        `with another config or metadata (session ${a.id})`,
      );
    }
  });

  it('answers 201 to exactly one of concurrent first submits with one key, 200 to the others', async () => {
    for (let i = 0; i < 10; i += 1) {
      const key = `burst-${Date.now()}-${i}`;
      const answers = await Promise.all(
        Array.from({ length: 8 }, async () => {
          const res = await submit({ instruction: 'same request', idempotencyKey: key });
          return { status: res.status, id: ((await res.json()) as { id: string }).id };
        }),
      );
      expect(new Set(answers.map((a) => a.id)).size, `burst ${i}`).toBe(1);
      const statuses = answers.map((a) => a.status).sort();
      expect(statuses, `burst ${i}`).toEqual([200, 200, 200, 200, 200, 200, 200, 201]);
    }
  });

  it('refuses one of two first submits racing with one key and different configs', async () => {
    for (let i = 0; i < 20; i += 1) {
      const key = `race-${Date.now()}-${i}`;
      const outcomes = await Promise.allSettled(
        [101_000, 102_000].map((maxTokens) =>
          cluster.client.submit({
            instruction: 'same words',
            idempotencyKey: key,
            config: { budget: { maxTokens } },
          }),
        ),
      );
      const kept = outcomes.flatMap((o) => (o.status === 'fulfilled' ? [o.value] : []));
      const refused = outcomes.flatMap((o) => (o.status === 'rejected' ? [o.reason] : []));
      expect(kept, `race ${i}`).toHaveLength(1);
      expect(refused[0]).toMatchObject({ code: 'CONFLICT' });
    }
  });

  it("hides the operator's secrets a session's config carries, and only in what it answers", async () => {
    const secrets = await createClient({
      connection: inject('redisUrl'),
      config: {
        ...cluster.config,
        execution: {
          mcpServers: [
            { name: 'gh', transport: 'stdio', command: 'gh-mcp', env: { GH_TOKEN: 'SECRET-1' } },
            {
              name: 'web',
              transport: 'http',
              url: 'https://me:SECRET-2@mcp.example/mcp',
              headers: { authorization: 'Bearer SECRET-3' },
            },
          ],
        },
        llm: { default: { baseUrl: 'http://me:SECRET-4@127.0.0.1:9/v1' } },
      },
    });
    const app = await serveApi(secrets);
    try {
      const created = await fetch(`${app.url}/sessions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ instruction: 'keep my secrets' }),
      });
      expect(created.status).toBe(201);
      const session = (await created.json()) as {
        id: string;
        config: { execution: { mcpServers: Record<string, unknown>[] }; llm: unknown };
      };
      const answers = [
        JSON.stringify(session),
        await (await fetch(`${app.url}/sessions/${session.id}`)).text(),
        await (await fetch(`${app.url}/sessions?limit=5`)).text(),
      ];
      for (const answer of answers) expect(answer).not.toMatch(/SECRET-\d/);
      // The names stay: a reader sees what is set.
      expect(session.config.execution.mcpServers).toMatchObject([
        { env: { GH_TOKEN: '[redacted]' } },
        {
          url: 'https://me:%5Bredacted%5D@mcp.example/mcp',
          headers: { authorization: '[redacted]' },
        },
      ]);
      // The session itself keeps them: the worker pods need them.
      const stored = (await secrets.get(session.id)).session.config.execution.mcpServers[0];
      expect(stored).toMatchObject({ env: { GH_TOKEN: 'SECRET-1' } });
    } finally {
      await app.close();
      await secrets.close();
    }
  });

  it('answers 409 when resuming a session that is not blocked', async () => {
    const { id } = (await (await submit({ instruction: 'tidy the tests' })).json()) as {
      id: string;
    };
    await waitForState(id, 'COMPLETED');
    const res = await fetch(url(`/sessions/${id}/resume`), {
      method: 'POST',
      headers: json,
      body: JSON.stringify({ mode: 'retry' }),
    });
    expect(res.status).toBe(409);
    expect(((await res.json()) as { error: string }).error).toBe('INVALID_STATE');
    // So is a cancel of a finished session, rather than accepted and then ignored.
    const cancel = await fetch(url(`/sessions/${id}/cancel`), { method: 'POST', headers: auth });
    expect(cancel.status).toBe(409);
    expect(await cancel.json()).toMatchObject({
      error: 'INVALID_STATE',
      message: expect.stringContaining('is already COMPLETED'),
    });
    const badTask = await fetch(url(`/sessions/${id}/resume`), {
      method: 'POST',
      headers: json,
      body: JSON.stringify({ taskIds: ['bad id'] }),
    });
    expect(badTask.status).toBe(400);

    // A resume body's budget is checked like the rest: limits must be positive, one given.
    for (const budget of [{ maxTokens: 0 }, {}]) {
      const bad = await fetch(url(`/sessions/${id}/resume`), {
        method: 'POST',
        headers: json,
        body: JSON.stringify({ budget }),
      });
      expect(bad.status).toBe(400);
    }
  });

  it('serves the history as JSON with stream ids and as JSONL', async () => {
    const { id } = (await (await submit({ instruction: 'add logging and metrics' })).json()) as {
      id: string;
    };
    await waitForState(id, 'COMPLETED');

    const asJson = await fetch(url(`/sessions/${id}/history`), { headers: auth });
    expect(asJson.headers.get('content-type')).toMatch(/^application\/json/);
    const stored = (await asJson.json()) as { id: string; entry: unknown }[];
    expect(stored.length).toBeGreaterThan(3);
    for (const s of stored) expect(HistoryEntry.safeParse(s.entry).success).toBe(true);

    const byQuery = await fetch(url(`/sessions/${id}/history?format=jsonl`), { headers: auth });
    expect(byQuery.headers.get('content-type')).toMatch(/^application\/x-ndjson/);
    const lines = (await byQuery.text()).trimEnd().split('\n');
    expect(lines.map((l) => JSON.parse(l) as unknown)).toEqual(stored.map((s) => s.entry));

    const byAccept = await fetch(url(`/sessions/${id}/history`), {
      headers: { ...auth, accept: 'application/x-ndjson' },
    });
    expect((await byAccept.text()).trimEnd().split('\n')).toEqual(lines);
  });
});

describe('server-sent events', () => {
  it('streams the history in order while the session runs and ends with COMPLETED', async () => {
    const { id } = (await (
      await submit({ instruction: 'build the parser and the printer' })
    ).json()) as {
      id: string;
    };
    const events = await readEvents(id);

    const entries = events.filter((e) => e.event === undefined);
    const ids = entries.map((e) => e.id!);
    expect(ids.length).toBeGreaterThan(3);
    for (let i = 1; i < ids.length; i += 1) {
      expect(compareStreamIds(ids[i - 1]!, ids[i]!), `${ids[i - 1]} < ${ids[i]}`).toBe(-1);
    }
    const last = HistoryEntry.parse(JSON.parse(entries.at(-1)!.data));
    expect(last).toMatchObject({ type: 'state_change', entity: 'session', to: 'COMPLETED' });

    const end = events.at(-1)!;
    expect(end.event).toBe('end');
    expect(JSON.parse(end.data)).toEqual({ sessionId: id, state: 'COMPLETED' });

    // The same entries, in the same order, as the stored history.
    const history = (await (
      await fetch(url(`/sessions/${id}/history`), { headers: auth })
    ).json()) as { id: string }[];
    expect(ids).toEqual(history.map((h) => h.id));
  });

  it('resumes after the id given in Last-Event-ID, live and after the session finished', async () => {
    const { id } = (await (await submit({ instruction: 'document the API' })).json()) as {
      id: string;
    };
    // Live: the submit already wrote the first entries; resume after the very first one.
    const [first] = (await (
      await fetch(url(`/sessions/${id}/history?limit=1`), { headers: auth })
    ).json()) as { id: string }[];
    const live = (await readEvents(id, { 'last-event-id': first!.id })).filter(
      (e) => e.event === undefined,
    );

    // Finished: the whole history, then resume from its middle.
    const all = (await readEvents(id)).filter((e) => e.event === undefined);
    expect(live.map((e) => e.id)).toEqual(all.slice(1).map((e) => e.id));
    const cut = Math.floor(all.length / 2);
    const rest = (await readEvents(id, { 'last-event-id': all[cut]!.id! })).filter(
      (e) => e.event === undefined,
    );
    expect(rest.map((e) => e.id)).toEqual(all.slice(cut + 1).map((e) => e.id));
  });

  it('answers 400 for a Last-Event-ID that is not a stream id', async () => {
    const { id } = (await (await submit({ instruction: 'one more' })).json()) as { id: string };
    const res = await fetch(url(`/sessions/${id}/events`), {
      headers: { ...auth, 'last-event-id': 'garbage' },
    });
    expect(res.status).toBe(400);
    expect(((await res.json()) as { issues: { path: string }[] }).issues[0]!.path).toBe(
      'last-event-id',
    );
    // Past Redis's 64-bit parts too, on every route that takes one (was a 500 from Redis).
    const huge = '99999999999999999999-0';
    const requests = [
      fetch(url(`/sessions/${id}/events`), { headers: { ...auth, 'last-event-id': huge } }),
      fetch(url(`/sessions/${id}/events?after=${huge}`), { headers: auth }),
      fetch(url(`/sessions/${id}/history?after=${huge}`), { headers: auth }),
    ];
    for (const response of await Promise.all(requests)) {
      expect(response.status).toBe(400);
      expect(await response.json()).toMatchObject({
        error: 'VALIDATION_FAILED',
        message: expect.stringContaining('at most 18446744073709551615'),
      });
    }
    const largest = await fetch(url(`/sessions/${id}/history?after=18446744073709551615-0`), {
      headers: auth,
    });
    expect(largest.status).toBe(200);
    expect(await largest.json()).toEqual([]);
  });
});

describe('a session that does not progress (no roles running)', () => {
  let idle: TestCluster;
  let idleServer: RunningHttpServer;
  beforeAll(async () => {
    idle = await startCluster({ pods: 0 });
    idleServer = await serveApi(idle.client, { token: TOKEN, readOnlyBoard: true });
  });
  afterAll(async () => {
    await idleServer?.close();
    await idle?.close();
  });

  const sseClients = async () => {
    const text = await (await fetch(`${idleServer.url}/metrics`, { headers: auth })).text();
    return Number(/^orq_api_sse_clients (\d+)/m.exec(text)?.[1]);
  };

  it('releases an event stream when the client disconnects', async () => {
    const created = await fetch(`${idleServer.url}/sessions`, {
      method: 'POST',
      headers: json,
      body: JSON.stringify({ instruction: 'never planned' }),
    });
    const { id } = (await created.json()) as { id: string };
    const controller = new AbortController();
    const res = await fetch(`${idleServer.url}/sessions/${id}/events`, {
      headers: auth,
      signal: controller.signal,
    });
    const reader = res.body!.getReader();
    let text = '';
    while (!text.includes('"submitted"'))
      text += new TextDecoder().decode((await reader.read()).value);
    expect(await sseClients()).toBe(1);
    controller.abort();
    await waitFor(async () => ((await sseClients()) === 0 ? true : undefined), 'stream cleanup');
  });

  it('accepts a cancel (202) that the coordinator then applies', async () => {
    const created = await fetch(`${idleServer.url}/sessions`, {
      method: 'POST',
      headers: json,
      body: JSON.stringify({ instruction: 'to be cancelled' }),
    });
    const { id } = (await created.json()) as { id: string };
    // Not finished yet: a delete is refused, saying how to finish it.
    const early = await fetch(`${idleServer.url}/sessions/${id}`, {
      method: 'DELETE',
      headers: auth,
    });
    expect(early.status).toBe(409);
    const refusal = (await early.json()) as { error: string; message: string; hint: string };
    expect(refusal.error).toBe('INVALID_STATE');
    expect(refusal.message).toBe(
      `session ${id} is PLANNING: only a finished session can be deleted`,
    );
    expect(refusal.hint).toContain(
      `Cancel it first (orq cancel ${id}, or POST /sessions/${id}/cancel)`,
    );
    const res = await fetch(`${idleServer.url}/sessions/${id}/cancel`, {
      method: 'POST',
      headers: json,
      body: JSON.stringify({ reason: 'changed my mind' }),
    });
    expect(res.status).toBe(202);
    await idle.startPod(['coordinator']);
    const view = await idle.client.wait(id, { timeoutMs: 20_000 });
    expect(view.session.state).toBe('CANCELLED');
  });

  it('serves Bull Board in read-only mode when asked', async () => {
    const res = await fetch(`${idleServer.url}/admin/queues/api/queues`, { headers: auth });
    expect(res.status).toBe(200);
    const body = (await res.json()) as { queues: { name: string; readOnlyMode: boolean }[] };
    expect(body.queues.map((q) => q.name).sort()).toEqual([
      'coordinator',
      'judge',
      'plan',
      'replan',
      'work',
    ]);
    expect(body.queues.every((q) => q.readOnlyMode)).toBe(true);
  });
});

describe('documents and metrics', () => {
  it('serves an OpenAPI document with every route and the zod schemas as components', async () => {
    const res = await fetch(url('/openapi.json'), { headers: auth });
    expect(res.status).toBe(200);
    const doc = (await res.json()) as {
      openapi: string;
      info: { version: string };
      paths: Record<string, Record<string, unknown>>;
      components: { schemas: Record<string, unknown> };
    };
    expect(doc.openapi).toMatch(/^3\./);
    expect(doc.info.version).toBe(packageVersion);
    for (const path of [
      '/sessions',
      '/sessions/{id}',
      '/sessions/{id}/cancel',
      '/sessions/{id}/resume',
      '/sessions/prune',
      '/sessions/{id}/history',
      '/sessions/{id}/events',
      '/healthz',
      '/readyz',
      '/metrics',
      '/quotas',
    ]) {
      expect(Object.keys(doc.paths)).toContain(path);
    }
    expect(Object.keys(doc.paths).some((p) => p.startsWith('/admin'))).toBe(false);
    expect(doc.components.schemas).toHaveProperty('Session');
    expect(doc.components.schemas).toHaveProperty('SubmitRequestInput');
    expect(JSON.stringify(doc.paths['/sessions']!.post)).toContain('SubmitRequest');
    // Every route taking a session id answers 400 for one that cannot be valid.
    for (const [path, routes] of Object.entries(doc.paths)) {
      if (!path.includes('{id}')) continue;
      for (const [method, route] of Object.entries(routes)) {
        const responses = (route as { responses: Record<string, unknown> }).responses;
        expect(Object.keys(responses), `${method} ${path}`).toContain('400');
      }
    }
  });

  it('exposes queue depths per orq queue and sessions by state to Prometheus', async () => {
    const { id } = (await (await submit({ instruction: 'count me' })).json()) as { id: string };
    await waitForState(id, 'COMPLETED');
    const res = await fetch(url('/metrics'), { headers: auth });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^text\/plain/);
    const text = await res.text();
    for (const queue of ['plan', 'judge', 'work', 'replan', 'coordinator']) {
      for (const state of ['waiting', 'active', 'delayed', 'failed']) {
        expect(text).toMatch(
          new RegExp(`^orq_queue_jobs\\{queue="${queue}",state="${state}"\\} \\d+$`, 'm'),
        );
      }
    }
    expect(
      Number(/^orq_sessions\{state="COMPLETED"\} (\d+)$/m.exec(text)?.[1]),
    ).toBeGreaterThanOrEqual(1);
    expect(text).toMatch(/^orq_redis_up 1$/m);
    // The builtin provider reports token usage like a real one: the planner spent some.
    expect(
      Number(/^orq_llm_tokens\{role="planner",direction="out"\} (\d+)$/m.exec(text)?.[1]),
    ).toBeGreaterThan(0);
    expect(Number(/^orq_llm_calls\{role="planner"\} (\d+)$/m.exec(text)?.[1])).toBeGreaterThan(0);
    // The builtin provider sends no HTTP request.
    expect(text).toMatch(/^orq_llm_http_requests\{role="planner"\} 0$/m);
    expect(text).toMatch(/^orq_api_sessions_submitted_total\{outcome="created"\} \d+$/m);
  });
});

describe('with Redis down', () => {
  it('answers 503 on /readyz and the session routes, and keeps /healthz at 200', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'orq-http-redis-'));
    const redis = await startTestRedis({ dir, appendonly: false });
    const client = await createClient({ connection: redis.url });
    const down = await serveApi(client, { token: TOKEN });
    try {
      expect((await fetch(`${down.url}/readyz`)).status).toBe(200);
      await redis.stop();

      const ready = await fetch(`${down.url}/readyz`);
      expect(ready.status).toBe(503);
      expect(await ready.json()).toEqual({ status: 'unavailable', redis: 'unreachable' });
      expect((await fetch(`${down.url}/healthz`)).status).toBe(200);

      const list = await fetch(`${down.url}/sessions`, { headers: auth });
      expect(list.status).toBe(503);
      const body = (await list.json()) as { error: string; message: string; hint: string };
      expect(body.error).toBe('REDIS_UNAVAILABLE');
      // Where Redis was looked for and what to do, not ioredis's words about its options.
      const { hostname, port } = new URL(redis.url);
      expect(body.message).toMatch(new RegExp(`^Redis at ${hostname}:${port} is unreachable`));
      expect(body.message).not.toMatch(/enableOfflineQueue|Stream isn't writeable|ioredis/);
      // A server made with createClient: the hint names its `connection` option.
      expect(body.hint).toContain('Check the `connection` option of createClient');

      // Bull Board's API answers like the rest of the API, not with its own 500.
      const board = await fetch(`${down.url}/admin/queues/api/queues`, { headers: auth });
      expect(board.status).toBe(503);
      expect(await board.json()).toMatchObject({
        error: 'REDIS_UNAVAILABLE',
        message: expect.stringMatching(/Redis is unreachable/) as string,
        hint: expect.any(String) as string,
      });

      const metrics = await fetch(`${down.url}/metrics`, { headers: auth });
      expect(metrics.status).toBe(200);
      expect(await metrics.text()).toMatch(/^orq_redis_up 0$/m);
    } finally {
      await down.close();
      await client.close();
      await redis.stop();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
