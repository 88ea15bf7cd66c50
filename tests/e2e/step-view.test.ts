import { mkdtempSync, realpathSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ScenarioInput } from '../../src/shared/config/scenario.js';
import { clusterPerTest, type TestCluster } from '../support/cluster.js';
import { eventually, recordingModels } from '../support/scenarios.js';
import { sessionViewBrowser } from '../support/session-view-browser.js';
import { createScriptedAgentModel } from '../../src/workers/executors/agent/scripted-model.js';

// A person approving or rejecting a step of a running agent (approval.steps, issue 48) in the
// session view, in a real headless Chromium.

const TIMEOUT = 20_000;
const ONE_TASK: ScenarioInput = {
  plans: [{ tasks: [{ id: 't1', title: 'Write the notes', acceptance: 'written', context: 'c' }] }],
  planJudgements: [{ score: 90, isAcceptable: true }],
  tasks: { t1: { judgements: [{ success: true, reason: 'written' }] } },
};

const startCluster = clusterPerTest();
const view = sessionViewBrowser();
let tmp: string;
beforeAll(() => {
  tmp = realpathSync(mkdtempSync(join(tmpdir(), 'orq-step-view-')));
});
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

/** A session whose agent waits to write t1.md, served with or without actions. */
async function waiting(readOnly: boolean) {
  const c: TestCluster = await startCluster({
    models: recordingModels(ONE_TASK).models,
    config: {
      execution: {
        defaultExecutor: 'agent',
        workspaceRoot: join(tmp, Math.random().toString(36).slice(2)),
      },
      approval: { steps: [{ tool: 'write_file' }] },
    },
  });
  const server = await view.serve(c.client, readOnly);
  const { id } = await c.client.submit({ instruction: 'Write the notes' });
  const wait = await eventually(
    async () => (await c.client.get(id)).session.stepWaits?.[0],
    'the step wait',
  );
  const { page, errors, dialogs } = await view.openSession(server, id);
  const step = page.locator(`.step[data-wait="${wait.id}"]`);
  await step.waitFor();
  return { c, id, page, errors, dialogs, wait, step };
}

describe('step approvals in the session view', () => {
  it('shows the exact tool input and runs the step once approved after the confirmation', async () => {
    const { c, id, page, errors, dialogs, step } = await waiting(false);
    expect(await step.locator('[data-input]').innerText()).toContain('"path": "t1.md"');
    await step.getByRole('button', { name: 'Approve step' }).click();
    await page.locator('h1 .state-COMPLETED').waitFor({ timeout: TIMEOUT });
    expect(dialogs).toEqual(['Run this step of task t1?']);
    expect(await page.locator('.step').count()).toBe(0);
    const answered = (await c.client.history(id)).find(
      (e) => e.entry.type === 'wait' && e.entry.action === 'answered',
    );
    expect(answered?.entry).toMatchObject({ answer: { action: 'approve' }, by: 'operator token' });
    expect(errors).toEqual([]);
  });

  it('sends a rejection with its reason', async () => {
    const { c, id, dialogs, step, wait, errors } = await waiting(false);
    await step.locator('textarea').fill('not in this repository');
    await step.getByRole('button', { name: 'Reject step' }).click();
    const answered = await eventually(async () => {
      const all = await c.client.history(id);
      return all.find((e) => e.entry.type === 'wait' && e.entry.action === 'answered')?.entry;
    }, 'the answer');
    expect(answered).toMatchObject({
      waitId: wait.id,
      answer: { action: 'reject', feedback: 'not in this repository' },
    });
    expect(dialogs).toEqual(['Reject this step? Task t1 hears your reason.']);
    expect(errors).toEqual([]);
  });

  it('shows the step without buttons in read-only mode', async () => {
    const { page, step } = await waiting(true);
    expect(await step.locator('[data-input]').innerText()).toContain('t1.md');
    expect(await page.getByRole('button', { name: 'Approve step' }).count()).toBe(0);
    expect(await step.locator('textarea').count()).toBe(0);
  });
});

describe("an agent's question in the session view", () => {
  it('shows the question and sends the answer to the running agent after the confirmation', async () => {
    const agent = createScriptedAgentModel({
      actions: [
        { tool: 'ask_human', input: { question: 'Staging or production?' } },
        { done: true, summary: 'pushed' },
      ],
    });
    const c: TestCluster = await startCluster({
      models: recordingModels(ONE_TASK).models,
      agentModel: () => agent,
      config: { execution: { defaultExecutor: 'agent', workspaceRoot: join(tmp, 'asking') } },
    });
    const server = await view.serve(c.client, false);
    const { id } = await c.client.submit({ instruction: 'Write the notes' });
    const asked = await eventually(
      async () => (await c.client.get(id)).session.questions?.[0],
      'the question',
    );
    const { page, errors, dialogs } = await view.openSession(server, id);
    const question = page.locator(`.question[data-wait="${asked.id}"]`);
    await question.waitFor();
    expect(await question.locator('[data-question]').innerText()).toBe('Staging or production?');
    await question.locator('textarea').fill('staging');
    await question.getByRole('button', { name: 'Answer' }).click();
    await page.locator('h1 .state-COMPLETED').waitFor({ timeout: TIMEOUT });
    expect(dialogs).toEqual(['Send this answer to the agent of task t1?']);
    const output = (await c.client.history(id)).find(
      (e) => e.entry.type === 'action' && e.entry.tool === 'ask_human' && e.entry.output,
    );
    expect(output?.entry).toMatchObject({ output: 'A person answered (operator token): staging' });
    expect(errors).toEqual([]);
  });
});
