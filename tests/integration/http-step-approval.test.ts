import { mkdtempSync, realpathSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { RunningHttpServer } from '../../src/producers/http/server.js';
import { parseSseStream } from '../../src/producers/http/sse.js';
import type { ScenarioInput } from '../../src/shared/config/scenario.js';
import { clusterPerTest } from '../support/cluster.js';
import { bearer, postAs as post, serveApi } from '../support/http.js';
import { webhookReceiver } from '../support/webhook-receiver.js';
import { eventually, recordingModels } from '../support/scenarios.js';

// Step approval over the HTTP API (issue 48): the approve and reject routes answer a step wait
// by its wait id or task, under the answer right; the SSE stream and the signed webhook tell
// when it opens and closes, as for a plan approval.

const TOKEN = 'api-token-0123456789abcdef';
const OPERATOR = 'operator-token-0123456789abcdef';
const ONE_TASK: ScenarioInput = {
  plans: [{ tasks: [{ id: 't1', title: 'Write the notes', acceptance: 'written', context: 'c' }] }],
  planJudgements: [{ score: 90, isAcceptable: true }],
  tasks: { t1: { judgements: [{ success: true, reason: 'written' }] } },
};

const startCluster = clusterPerTest();
const servers: RunningHttpServer[] = [];
let tmp: string;
beforeAll(() => {
  tmp = realpathSync(mkdtempSync(join(tmpdir(), 'orq-http-steps-')));
});
afterAll(() => rmSync(tmp, { recursive: true, force: true }));
afterEach(async () => {
  await Promise.all(servers.splice(0).map((s) => s.close()));
});

describe('step approval over the HTTP API', () => {
  it('approves a step by its wait id under the answer right, once, with the events and the webhook', async () => {
    const hook = await webhookReceiver();
    process.env.ORQ_TEST_WEBHOOK_SECRET = 'hook-secret';
    try {
      const c = await startCluster({
        models: recordingModels(ONE_TASK).models,
        config: {
          execution: { defaultExecutor: 'agent', workspaceRoot: join(tmp, 'a') },
          approval: { steps: [{ tool: 'write_file' }] },
          notifications: { webhook: { url: hook.url, secretEnv: 'ORQ_TEST_WEBHOOK_SECRET' } },
        },
      });
      const server = await serveApi(c.client, { token: TOKEN, operatorToken: OPERATOR });
      servers.push(server);
      const { id } = await c.client.submit({ instruction: 'Write the notes' });
      const wait = await eventually(
        async () => (await c.client.get(id)).session.stepWaits?.[0],
        'the step wait',
      );
      const shown = (await (
        await fetch(`${server.url}/sessions/${id}`, { headers: bearer(TOKEN) })
      ).json()) as { session: { state: string; stepWaits: unknown[] } };
      expect(shown.session.state).toBe('RUNNING');
      expect(shown.session.stepWaits).toEqual([
        expect.objectContaining({ id: wait.id, tool: 'write_file', input: expect.any(Object) }),
      ]);
      const events = fetch(`${server.url}/sessions/${id}/events`, { headers: bearer(TOKEN) });

      expect(
        (await post(server, `/sessions/${id}/approve`, TOKEN, { waitId: wait.id })).status,
      ).toBe(403);
      const approved = await post(server, `/sessions/${id}/approve`, OPERATOR, { waitId: wait.id });
      expect(approved.status).toBe(200);
      expect(await approved.json()).toMatchObject({
        sessionId: id,
        waitId: wait.id,
        applied: true,
      });
      expect((await c.client.wait(id, { timeoutMs: 20_000 })).session.state).toBe('COMPLETED');

      const again = await post(server, `/sessions/${id}/approve`, OPERATOR, { waitId: wait.id });
      expect(again.status).toBe(409);
      expect(await again.json()).toMatchObject({ error: 'WAIT_ENDED' });

      const streamed = parseSseStream(await (await events).text())
        .filter((e) => e.event !== 'end')
        .map((e) => JSON.parse(e.data) as { type: string; action?: string; by?: string })
        .filter((e) => e.type === 'wait');
      expect(streamed.map((e) => [e.action, e.by])).toEqual([
        ['opened', undefined],
        ['answered', 'operator token'],
      ]);

      await eventually(async () => (hook.received.length >= 2 ? true : undefined), 'closed');
      expect(hook.posted()).toEqual([
        expect.objectContaining({
          event: 'wait.opened',
          kind: 'step-approval',
          waitId: wait.id,
          state: 'RUNNING',
        }),
        expect.objectContaining({
          event: 'wait.closed',
          kind: 'step-approval',
          waitId: wait.id,
          outcome: 'answered:approve',
          state: 'RUNNING',
        }),
      ]);
    } finally {
      delete process.env.ORQ_TEST_WEBHOOK_SECRET;
      await hook.close();
    }
  });

  it('rejects a step named by its task, with the reason as feedback', async () => {
    const c = await startCluster({
      models: recordingModels(ONE_TASK).models,
      config: {
        execution: { defaultExecutor: 'agent', workspaceRoot: join(tmp, 'b') },
        approval: { steps: [{ tool: 'write_file' }] },
      },
    });
    const server = await serveApi(c.client, { token: TOKEN, operatorToken: OPERATOR });
    servers.push(server);
    const { id } = await c.client.submit({ instruction: 'Write the notes' });
    const wait = await eventually(
      async () => (await c.client.get(id)).session.stepWaits?.[0],
      'the step wait',
    );
    const rejected = await post(server, `/sessions/${id}/reject`, OPERATOR, {
      taskId: 't1',
      feedback: 'not here',
    });
    expect(rejected.status).toBe(200);
    expect(await rejected.json()).toMatchObject({ waitId: wait.id });
    const history = await c.client.history(id);
    expect(
      history.some(
        (h) =>
          h.entry.type === 'wait' && h.entry.action === 'answered' && h.entry.waitId === wait.id,
      ),
    ).toBe(true);
  });
});
