import { chromium, type Browser, type BrowserContext } from 'playwright-core';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { RunningHttpServer } from '../../src/producers/http/server.js';
import type { ScenarioInput } from '../../src/shared/llm/scenario.js';
import { CHROMIUM_ARGS, chromiumExecutable } from '../support/chromium.js';
import { clusterPerTest, type TestCluster } from '../support/cluster.js';
import { serveApi } from '../support/http.js';
import { recordingModels } from '../support/scenarios.js';

// A person answering a blocked task's question in the session view (issue 48), in a real
// headless Chromium.

const TOKEN = 'view-token-0123456789abcdef';
const OPERATOR = 'view-operator-0123456789abcdef';
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
let browser: Browser;
const servers: RunningHttpServer[] = [];
const contexts: BrowserContext[] = [];

beforeAll(async () => {
  browser = await chromium.launch({
    executablePath: await chromiumExecutable(),
    args: [...CHROMIUM_ARGS],
  });
}, 60_000);
afterEach(async () => {
  await Promise.all(contexts.splice(0).map((c) => c.close()));
  await Promise.all(servers.splice(0).map((s) => s.close()));
});
afterAll(async () => {
  await browser?.close();
});

/** A session blocked on the question, served with or without actions. */
async function asking(readOnly: boolean) {
  const recorded = recordingModels(ASKS);
  const c: TestCluster = await startCluster({ models: recorded.models });
  const server = await serveApi(c.client, {
    token: TOKEN,
    operatorToken: OPERATOR,
    readOnlyBoard: readOnly,
  });
  servers.push(server);
  const { id } = await c.client.submit({ instruction: 'Push the image' });
  expect((await c.client.wait(id, { timeoutMs: TIMEOUT })).session.state).toBe('BLOCKED');
  const context = await browser.newContext();
  contexts.push(context);
  const page = await context.newPage();
  const errors: string[] = [];
  const dialogs: string[] = [];
  page.on('pageerror', (error) => errors.push(error.message));
  page.on('dialog', (dialog) => {
    dialogs.push(dialog.message());
    void dialog.accept();
  });
  expect((await page.goto(`${server.url}/ui?token=${OPERATOR}`))?.status()).toBe(200);
  await page.goto(`${server.url}/ui/sessions/${id}`);
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
