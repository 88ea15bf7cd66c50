import { afterEach, describe, expect, it } from 'vitest';
import type { RunningHttpServer } from '../../src/producers/http/server.js';
import { parseSseStream } from '../../src/producers/http/sse.js';
import type { ScenarioInput } from '../../src/shared/config/scenario.js';
import { clusterPerTest } from '../support/cluster.js';
import { budgetStoppedQuestion } from '../support/budget-question.js';
import { bearer, postAs as post, serveApi } from '../support/http.js';
import { webhookReceiver } from '../support/webhook-receiver.js';
import { eventually, recordingModels } from '../support/scenarios.js';

const TOKEN = 'api-token-0123456789abcdef';
const OPERATOR = 'operator-token-0123456789abcdef';
const QUESTION = 'Which registry should the image go to?';

/** One task the judge blocks with a question; its next execution is accepted. */
const ASKS: ScenarioInput = {
  plans: [{ tasks: [{ id: 'push', title: 'Push the image', acceptance: 'pushed', context: 'c' }] }],
  planJudgements: [{ score: 90, isAcceptable: true }],
  tasks: {
    push: {
      results: [{ output: 'which one?' }, { output: 'pushed' }],
      judgements: [
        { success: false, reason: 'no registry given', question: QUESTION },
        { success: true, reason: 'pushed' },
      ],
    },
  },
};

const startCluster = clusterPerTest();
const servers: RunningHttpServer[] = [];
afterEach(async () => {
  await Promise.all(servers.splice(0).map((s) => s.close()));
});

describe('questions over the HTTP API', () => {
  it('answers under the answer right, once, with the events and the webhook of plan approval', async () => {
    const hook = await webhookReceiver();
    process.env.ORQ_TEST_WEBHOOK_SECRET = 'hook-secret';
    try {
      const recorded = recordingModels(ASKS);
      const c = await startCluster({
        models: recorded.models,
        config: {
          notifications: { webhook: { url: hook.url, secretEnv: 'ORQ_TEST_WEBHOOK_SECRET' } },
        },
      });
      const server = await serveApi(c.client, { token: TOKEN, operatorToken: OPERATOR });
      servers.push(server);
      const { id } = await c.client.submit({ instruction: 'Push the image' });
      expect((await c.client.wait(id, { timeoutMs: 20_000 })).session.state).toBe('BLOCKED');

      // The question is on the session as the API shows it.
      const view = await fetch(`${server.url}/sessions/${id}`, { headers: bearer(TOKEN) });
      const body = (await view.json()) as { session: { questions: unknown[] } };
      expect(body.session.questions).toEqual([
        expect.objectContaining({ id: 'question-push-1', taskId: 'push', question: QUESTION }),
      ]);
      const events = fetch(`${server.url}/sessions/${id}/events`, { headers: bearer(TOKEN) });

      // The API token has no answer right unless http.mayAnswer lists it.
      const refused = await post(server, `/sessions/${id}/answer`, TOKEN, { text: 'staging' });
      expect(refused.status).toBe(403);
      const empty = await post(server, `/sessions/${id}/answer`, OPERATOR, { text: '' });
      expect(empty.status).toBe(400);

      const answered = await post(server, `/sessions/${id}/answer`, OPERATOR, {
        text: 'staging',
        taskId: 'push',
        waitId: 'question-push-1',
      });
      expect(answered.status).toBe(200);
      expect(await answered.json()).toMatchObject({
        sessionId: id,
        waitId: 'question-push-1',
        applied: true,
      });
      expect((await c.client.wait(id, { timeoutMs: 20_000 })).session.state).toBe('COMPLETED');
      const second = recorded.calls.execute.find((r) => r.task.id === 'push' && r.attempt === 2);
      expect(second?.feedback).toContain('staging');

      const again = await post(server, `/sessions/${id}/answer`, OPERATOR, {
        text: 'production',
        taskId: 'push',
      });
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
          kind: 'question',
          waitId: 'question-push-1',
          state: 'RUNNING',
        }),
        expect.objectContaining({
          event: 'wait.closed',
          kind: 'question',
          waitId: 'question-push-1',
          outcome: 'answered:answer',
          state: 'RUNNING',
        }),
      ]);
    } finally {
      delete process.env.ORQ_TEST_WEBHOOK_SECRET;
      await hook.close();
    }
  });

  it('answers 409 BUDGET_EXHAUSTED with the command that raises the budget, for a session its budget stopped', async () => {
    const { c, id } = await budgetStoppedQuestion(startCluster);
    const server = await serveApi(c.client, { token: TOKEN, operatorToken: OPERATOR });
    servers.push(server);
    const refused = await post(server, `/sessions/${id}/answer`, OPERATOR, {
      text: 'staging',
      taskId: 'Q',
    });
    expect(refused.status).toBe(409);
    const body = (await refused.json()) as { error: string; message: string; hint: string };
    expect(body.error).toBe('BUDGET_EXHAUSTED');
    expect(body.message).toContain('question-Q-1 stays open');
    expect(body.hint).toContain(`POST /sessions/${id}/resume with a budget`);
    expect((await c.client.get(id)).session.questions?.map((q) => q.id)).toEqual(['question-Q-1']);
  });
});
