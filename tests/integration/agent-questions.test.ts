import { mkdtempSync, realpathSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { HistoryEntry } from '../../src/shared/domain/history.js';
import { submitAgentSession, waitEntries } from '../support/agent-session.js';
import { clusterPerTest } from '../support/cluster.js';
import { decisions, eventually, historyOf } from '../support/scenarios.js';

/**
 * An agent's ask_human through the library (issue 48): the running task asks a person, its
 * work job ends, the session shows the question (session.questions, with the step), and the
 * answer resumes the same execution with the answer as the tool's result.
 */

const startCluster = clusterPerTest();
const TIMEOUT = 20_000;
const QUESTION = 'Staging or production?';
let tmp: string;
beforeAll(() => {
  tmp = realpathSync(mkdtempSync(join(tmpdir(), 'orq-agent-questions-')));
});
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

async function asking() {
  const { c, id, agent } = await submitAgentSession(startCluster, {
    actions: [
      { tool: 'ask_human', input: { question: QUESTION } },
      { done: true, summary: 'pushed where the person said' },
    ],
    workspaces: tmp,
  });
  const question = await eventually(
    async () => (await c.client.get(id)).session.questions?.[0],
    'the question',
  );
  return { c, id, question, agent };
}

describe('ask_human (an agent asks a person mid-run)', () => {
  it('opens a question of the running task, listed as waiting', async () => {
    const { c, id, question } = await asking();
    expect(question).toMatchObject({
      id: 'ask-push-1-1',
      kind: 'question',
      taskId: 'push',
      attempt: 1,
      step: 1, // step 0 is the agent's plan
      question: QUESTION,
    });
    const view = await c.client.get(id);
    expect(view.session.state).toBe('RUNNING');
    expect(view.tasks[0]).toMatchObject({ state: 'RUNNING', attempts: 1 });
    expect(await c.client.waiting()).toEqual([expect.objectContaining({ id })]);
  });

  it('resumes the same execution with the answer as the tool result; the history keeps both; once', async () => {
    const { c, id, agent } = await asking();
    const outcome = await c.client.answerQuestion(id, 'staging', { taskId: 'push', by: 'test' });
    expect(outcome).toMatchObject({ waitId: 'ask-push-1-1', applied: true });
    const done = await c.client.wait(id, { timeoutMs: TIMEOUT });
    expect(done.session.state).toBe('COMPLETED');
    expect(done.session.questions).toBeUndefined();
    expect(done.tasks[0]).toMatchObject({ state: 'DONE', attempts: 1 });
    // The model was not asked the first step again: two calls, the question and done.
    expect(agent.calls.nextAction).toBe(2);
    const all = await historyOf(c.client, id);
    expect(waitEntries(all).map((e) => [e.action, e.answer, e.by])).toEqual([
      ['opened', undefined, undefined],
      ['answered', { action: 'answer', text: 'staging' }, 'test'],
    ]);
    const answered = all.find(
      (e): e is Extract<HistoryEntry, { type: 'action' }> =>
        e.type === 'action' && e.tool === 'ask_human' && e.output !== undefined,
    );
    expect(answered?.output).toBe('A person answered (test): staging');
    expect(decisions(all, 'question:answer')).toHaveLength(1);
    await expect(c.client.answerQuestion(id, 'production')).rejects.toMatchObject({
      code: 'WAIT_ENDED',
    });
  });

  it('refuses an approve sent to a question', async () => {
    const { c, id } = await asking();
    await expect(c.client.approve(id, { waitId: 'ask-push-1-1' })).rejects.toMatchObject({
      code: 'WAIT_ENDED',
    });
    expect((await c.client.get(id)).session.questions).toHaveLength(1);
  });
});
