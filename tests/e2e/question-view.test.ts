import { describe, expect, it } from 'vitest';
import type { ScenarioInput } from '../../src/shared/config/scenario.js';
import { clusterPerTest, type TestCluster } from '../support/cluster.js';
import { recordingModels } from '../support/scenarios.js';
import { sessionViewBrowser } from '../support/session-view-browser.js';

// A person answering a blocked task's question in the session view (issue 48), in a real
// headless Chromium.

const TIMEOUT = 20_000;
const QUESTION = 'Which registry should the image go to?';
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
const view = sessionViewBrowser();

/** A session blocked on the question, served with or without actions. */
async function asking(readOnly: boolean) {
  const recorded = recordingModels(ASKS);
  const c: TestCluster = await startCluster({ models: recorded.models });
  const server = await view.serve(c.client, readOnly);
  const { id } = await c.client.submit({ instruction: 'Push the image' });
  expect((await c.client.wait(id, { timeoutMs: TIMEOUT })).session.state).toBe('BLOCKED');
  const { page, errors, dialogs } = await view.openSession(server, id);
  return { c, id, page, errors, dialogs, recorded };
}

describe('questions in the session view', () => {
  it('shows the question and sends the answer after the confirmation', async () => {
    const { c, id, page, errors, dialogs, recorded } = await asking(false);
    const question = page.locator('.question[data-wait="question-push-1"]');
    await question.waitFor();
    expect(await question.locator('[data-question]').innerText()).toBe(QUESTION);
    await question.locator('textarea').fill('the staging registry');
    await question.getByRole('button', { name: 'Answer' }).click();
    await page.locator('h1 .state-COMPLETED').waitFor({ timeout: TIMEOUT });
    expect(dialogs).toEqual(['Send this answer and run task push again with it?']);
    expect(await page.locator('.question').count()).toBe(0);
    const second = recorded.calls.execute.find((r) => r.task.id === 'push' && r.attempt === 2);
    expect(second?.feedback).toContain('the staging registry');
    const answered = (await c.client.history(id)).find(
      (e) => e.entry.type === 'wait' && e.entry.action === 'answered',
    );
    expect(answered?.entry).toMatchObject({ by: 'operator token' });
    expect(errors).toEqual([]);
  });

  it('shows the question without an answer box in read-only mode', async () => {
    const { page } = await asking(true);
    const question = page.locator('.question[data-wait="question-push-1"]');
    await question.waitFor();
    expect(await question.locator('[data-question]').innerText()).toBe(QUESTION);
    expect(await question.locator('textarea').count()).toBe(0);
    expect(await page.getByRole('button', { name: 'Answer' }).count()).toBe(0);
  });
});
