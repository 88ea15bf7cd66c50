import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RunningHttpServer } from '../../src/producers/http/server.js';
import { startCluster, type TestCluster } from '../support/cluster.js';
import { exampleScenario } from '../support/scenarios.js';
import { bearer, serveApi } from '../support/http.js';

const TOKEN = 'test-token-0123456789abcdef';
const auth = bearer(TOKEN);

// No roles at first: a submitted session stays PLANNING until the test starts a pod.
let cluster: TestCluster;
let server: RunningHttpServer;

beforeAll(async () => {
  cluster = await startCluster({ pods: 0 });
  server = await serveApi(cluster.client, { token: TOKEN });
}, 30_000);

afterAll(async () => {
  await server?.close();
  await cluster?.close();
});

const get = (path: string, headers: Record<string, string> = auth) =>
  fetch(`${server.url}${path}`, { headers });

describe('GET /sessions/:id/result', () => {
  it('answers 409 for a session still planning, the result so far with partial=true, and the result once it completed', async () => {
    const { id } = await cluster.client.submit({
      instruction: 'login with validation',
      config: { llm: { scenario: exampleScenario('replan-task.yaml') } },
    });

    const early = await get(`/sessions/${id}/result`);
    expect(early.status).toBe(409);
    const refusal = (await early.json()) as { error: string; message: string; hint: string };
    expect(refusal.error).toBe('INVALID_STATE');
    expect(refusal.message).toContain(`session ${id} is PLANNING`);
    expect(refusal.hint).toContain(`GET /sessions/${id}/result?partial=true`);

    const partial = await get(`/sessions/${id}/result?partial=true`);
    expect(partial.status).toBe(200);
    expect(await partial.json()).toMatchObject({
      sessionId: id,
      state: 'PLANNING',
      complete: false,
      outputs: [],
      notes: [`Session ${id} is still planning: no task has run yet.`],
    });

    await cluster.startPod();
    const view = await cluster.client.wait(id, { timeoutMs: 30_000 });
    expect(view.session.state).toBe('COMPLETED');
    const done = await get(`/sessions/${id}/result`);
    expect(done.status).toBe(200);
    const result = (await done.json()) as {
      complete: boolean;
      outputs: { taskId: string }[];
      text: string;
    };
    expect(result.complete).toBe(true);
    expect(result.outputs.map((o) => o.taskId)).toEqual(['t2.r1.2']);
    expect(result.text).toBe(view.tasks.find((t) => t.id === 't2.r1.2')?.result?.output);
  });

  it('asks for the token as the other routes do', async () => {
    const { id } = await cluster.client.submit({ instruction: 'secret result' });
    expect((await get(`/sessions/${id}/result`, {})).status).toBe(401);
    expect((await get(`/sessions/${id}/result`, { authorization: 'Bearer wrong' })).status).toBe(
      401,
    );
  });

  it('answers 404 for an unknown session and 400 for a partial that is not true or false', async () => {
    const missing = await get('/sessions/no-such-session/result');
    expect(missing.status).toBe(404);
    expect(((await missing.json()) as { error: string }).error).toBe('NOT_FOUND');
    const { id } = await cluster.client.submit({ instruction: 'bad query' });
    expect((await get(`/sessions/${id}/result?partial=yes`)).status).toBe(400);
  });

  it('is in the OpenAPI document, with SessionResult as a component', async () => {
    const doc = (await (await get('/openapi.json')).json()) as {
      paths: Record<string, Record<string, unknown>>;
      components: { schemas: Record<string, unknown> };
    };
    expect(Object.keys(doc.paths['/sessions/{id}/result'] ?? {})).toEqual(['get']);
    expect(doc.components.schemas).toHaveProperty('SessionResult');
    expect(JSON.stringify(doc.paths['/sessions/{id}/result'])).toContain('SessionResult');
  });
});
