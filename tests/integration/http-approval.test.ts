import { afterEach, describe, expect, it } from 'vitest';
import type { RunningHttpServer } from '../../src/producers/http/server.js';
import { parseSseStream } from '../../src/producers/http/sse.js';
import { ApiKeyStore } from '../../src/shared/store/api-keys.js';
import { webhookSignature } from '../../src/workers/coordinator/webhook.js';
import { clusterPerTest, type TestCluster } from '../support/cluster.js';
import { bearer, postAs as post, serveApi } from '../support/http.js';
import { webhookReceiver } from '../support/webhook-receiver.js';
import { eventually } from '../support/scenarios.js';

const TOKEN = 'api-token-0123456789abcdef';
const OPERATOR = 'operator-token-0123456789abcdef';
const INSTRUCTION = '認証機能とバリデーションを実装して';

const startCluster = clusterPerTest();
const servers: RunningHttpServer[] = [];
afterEach(async () => {
  await Promise.all(servers.splice(0).map((s) => s.close()));
});

async function serve(c: TestCluster, options: { mayAnswer?: ('operator' | 'api')[] } = {}) {
  const server = await serveApi(c.client, { token: TOKEN, operatorToken: OPERATOR, ...options });
  servers.push(server);
  return server;
}

async function waiting(c: TestCluster, tenant?: string): Promise<string> {
  const session = await c.client.submit({
    instruction: INSTRUCTION,
    config: { approval: { plan: 'required' } },
    ...(tenant ? { tenant } : {}),
  });
  const view = await c.client.wait(session.id, { timeoutMs: 20_000 });
  expect(view.session.state).toBe('AWAITING_APPROVAL');
  return session.id;
}

describe('plan approval over the HTTP API', () => {
  it('is a right of its own: the operator may answer, the API token may not unless listed', async () => {
    const c = await startCluster();
    const server = await serve(c);
    const id = await waiting(c);

    const refused = await post(server, `/sessions/${id}/approve`, TOKEN);
    expect(refused.status).toBe(403);
    expect(await refused.json()).toMatchObject({ error: 'FORBIDDEN' });
    expect((await c.client.get(id)).session.state).toBe('AWAITING_APPROVAL');

    // The session, with its wait, is readable with the API token.
    const view = await fetch(`${server.url}/sessions/${id}`, { headers: bearer(TOKEN) });
    const body = (await view.json()) as { session: { wait: { id: string; plan: unknown } } };
    expect(body.session.wait.id).toBe('plan-0');

    const approved = await post(server, `/sessions/${id}/approve`, OPERATOR, { waitId: 'plan-0' });
    expect(approved.status).toBe(200);
    expect(await approved.json()).toMatchObject({ sessionId: id, waitId: 'plan-0', applied: true });
    expect((await c.client.wait(id, { timeoutMs: 20_000 })).session.state).toBe('COMPLETED');

    // The wait has ended: a second answer is 409 WAIT_ENDED.
    const again = await post(server, `/sessions/${id}/approve`, OPERATOR);
    expect(again.status).toBe(409);
    expect(await again.json()).toMatchObject({ error: 'WAIT_ENDED' });

    const history = await c.client.history(id);
    const answered = history.find((e) => e.entry.type === 'wait' && e.entry.action === 'answered');
    expect(answered?.entry).toMatchObject({ by: 'operator token' });
  });

  it('lets the API token answer when http.mayAnswer lists it; rejects and edits are checked', async () => {
    const c = await startCluster();
    const server = await serve(c, { mayAnswer: ['operator', 'api'] });
    const id = await waiting(c);

    const noFeedback = await post(server, `/sessions/${id}/reject`, TOKEN, {});
    expect(noFeedback.status).toBe(400);
    const dropped = await post(server, `/sessions/${id}/edit`, TOKEN, {
      plan: { tasks: [{ id: 'x', title: 'other', acceptance: 'done' }] },
    });
    expect(dropped.status).toBe(400);
    expect(((await dropped.json()) as { message: string }).message).toContain(
      'drops required terms',
    );

    const rejected = await post(server, `/sessions/${id}/reject`, TOKEN, {
      feedback: 'one task per module',
      waitId: 'plan-0',
    });
    expect(rejected.status).toBe(200);
    const again = await c.client.wait(id, { timeoutMs: 20_000 });
    expect(again.session.wait?.id).toBe('plan-1');

    const stale = await post(server, `/sessions/${id}/approve`, TOKEN, { waitId: 'plan-0' });
    expect(stale.status).toBe(409);
    expect(await stale.json()).toMatchObject({ error: 'WAIT_ENDED' });
  });

  it("gives a tenant's key the right only when created with it, for its own tenant's sessions", async () => {
    const c = await startCluster();
    const server = await serve(c);
    const keys = new ApiKeyStore(c.client.store.redis, c.prefix);
    const plain = (await keys.create('acme')).key;
    const answering = (await keys.create('acme', 'approver', ['answer'])).key;
    const other = (await keys.create('globex', 'approver', ['answer'])).key;
    const id = await waiting(c, 'acme');

    expect((await post(server, `/sessions/${id}/approve`, plain)).status).toBe(403);
    expect((await post(server, `/sessions/${id}/approve`, other)).status).toBe(404);
    const approved = await post(server, `/sessions/${id}/approve`, answering);
    expect(approved.status).toBe(200);
    expect((await c.client.wait(id, { timeoutMs: 20_000 })).session.state).toBe('COMPLETED');
  });

  it('streams the start and the end of the wait as events', async () => {
    const c = await startCluster();
    const server = await serve(c);
    const id = await waiting(c);
    const response = await fetch(`${server.url}/sessions/${id}/events`, {
      headers: bearer(TOKEN),
    });
    expect(response.status).toBe(200);
    // The stream is open: the approval's entries come through it, then its end.
    await c.client.approve(id);
    const events = parseSseStream(await response.text());
    const seen = events
      .filter((e) => e.event !== 'end')
      .map((e) => JSON.parse(e.data) as { type: string; action?: string })
      .filter((e) => e.type === 'wait')
      .map((e) => e.action);
    expect(seen).toEqual(['opened', 'answered']);
  });
});

describe('the webhook of a wait for a person', () => {
  it('posts signed events when the wait opens and closes, retrying a failure with backoff', async () => {
    const hook = await webhookReceiver([500]);
    process.env.ORQ_TEST_WEBHOOK_SECRET = 'hook-secret';
    try {
      const c = await startCluster({
        config: {
          notifications: {
            webhook: { url: hook.url, secretEnv: 'ORQ_TEST_WEBHOOK_SECRET', backoffMs: 50 },
          },
        },
      });
      const id = await waiting(c);
      // The first post failed (500); the next try came after the backoff, as the same delivery.
      await eventually(async () => (hook.received.length >= 2 ? true : undefined), 'a retry');
      const [failed, opened] = hook.received;
      expect(failed!.headers['x-orq-delivery']).toBe(opened!.headers['x-orq-delivery']);
      await c.client.approve(id);
      await eventually(async () => (hook.received.length >= 3 ? true : undefined), 'closed');
      const events = hook.received.slice(1).map((r) => {
        const expected = webhookSignature(
          'hook-secret',
          String(r.headers['x-orq-timestamp']),
          r.body,
        );
        expect(r.headers['x-orq-signature']).toBe(expected);
        return JSON.parse(r.body) as Record<string, unknown>;
      });
      expect(events).toEqual([
        expect.objectContaining({
          event: 'wait.opened',
          sessionId: id,
          waitId: 'plan-0',
          state: 'AWAITING_APPROVAL',
        }),
        expect.objectContaining({
          event: 'wait.closed',
          sessionId: id,
          outcome: 'answered:approve',
          state: 'RUNNING',
        }),
      ]);
    } finally {
      delete process.env.ORQ_TEST_WEBHOOK_SECRET;
      await hook.close();
    }
  });
});
