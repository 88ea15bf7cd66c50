import { describe, expect, it } from 'vitest';
import { clusterPerTest, type TestCluster } from '../support/cluster.js';
import { sessionViewBrowser, VIEW_TOKEN as TOKEN } from '../support/session-view-browser.js';

// A person answering a plan approval in the session view (issue 48), in a real headless Chromium.

const TIMEOUT = 20_000;
const startCluster = clusterPerTest();
const view = sessionViewBrowser();
const serve = (c: TestCluster, readOnly = false) => view.serve(c.client, readOnly);
const openSession = view.openSession;

async function waiting(c: TestCluster): Promise<string> {
  const session = await c.client.submit({
    instruction: '認証機能とバリデーションを実装して',
    config: { approval: { plan: 'required' } },
  });
  const view = await c.client.wait(session.id, { timeoutMs: TIMEOUT });
  expect(view.session.state).toBe('AWAITING_APPROVAL');
  return session.id;
}

const state = async (c: TestCluster, id: string) => (await c.client.get(id)).session.state;

describe('plan approval in the session view', () => {
  it('shows the plan with its score and approves it after the confirmation', async () => {
    const c = await startCluster();
    const server = await serve(c);
    const id = await waiting(c);
    const { page, errors, dialogs } = await openSession(server, id);
    const wait = page.locator('section.wait[data-wait="plan-0"]');
    await wait.waitFor();
    const { plan } = (await c.client.get(id)).session.wait!;
    expect(await wait.locator('.wait-plan li').count()).toBe(plan.tasks.length);
    expect(await wait.locator('[data-score]').innerText()).toMatch(/^\d+/);
    await page.getByRole('button', { name: 'Approve plan' }).click();
    await page.locator('h1 .state-COMPLETED').waitFor({ timeout: TIMEOUT });
    expect(dialogs).toEqual(['Approve this plan and start its tasks?']);
    expect(await page.locator('section.wait').count()).toBe(0);
    expect(errors).toEqual([]);
  });

  it('rejects with the feedback typed, and runs an edited plan', async () => {
    const c = await startCluster();
    const server = await serve(c);
    const id = await waiting(c);
    const { page, errors } = await openSession(server, id);
    await page.fill('#reject-feedback', 'keep the validation separate');
    await page.getByRole('button', { name: 'Reject with feedback' }).click();
    await page.locator('section.wait[data-wait="plan-1"]').waitFor({ timeout: TIMEOUT });
    const history = await c.client.history(id);
    expect(JSON.stringify(history)).toContain('keep the validation separate');

    // Edit: one more task after the first, written into the plan's JSON.
    const { plan } = (await c.client.get(id)).session.wait!;
    const edited = {
      ...plan,
      tasks: [
        ...plan.tasks,
        { id: 'review', title: 'Review 認証', acceptance: 'ok', dependencies: [plan.tasks[0]!.id] },
      ],
    };
    await page.locator('summary', { hasText: 'Edit the plan' }).click();
    await page.fill('#plan-edit', JSON.stringify(edited));
    await page.getByRole('button', { name: 'Run edited plan' }).click();
    await page.locator('h1 .state-COMPLETED').waitFor({ timeout: TIMEOUT });
    expect((await c.client.get(id)).tasks.map((t) => t.id)).toContain('review');
    expect(errors).toEqual([]);
  });

  it('says why an answer is refused: an edit dropping a required term, a token without the right', async () => {
    const c = await startCluster();
    const server = await serve(c);
    const id = await waiting(c);
    const { page } = await openSession(server, id);
    await page.locator('summary', { hasText: 'Edit the plan' }).click();
    await page.fill('#plan-edit', '{"tasks":[{"id":"x","title":"other","acceptance":"done"}]}');
    await page.getByRole('button', { name: 'Run edited plan' }).click();
    const status = page.locator('.action-status[data-outcome="refused"]');
    await status.waitFor();
    expect(await status.innerText()).toContain('drops required terms');
    expect(await state(c, id)).toBe('AWAITING_APPROVAL');

    // The API token's cookie may read the view but not answer (http.mayAnswer: operator).
    const { page: reader } = await openSession(server, id, TOKEN);
    await reader.getByRole('button', { name: 'Approve plan' }).click();
    const refused = reader.locator('.action-status[data-outcome="refused"]');
    await refused.waitFor();
    expect(await refused.innerText()).toContain('403');
    expect(await state(c, id)).toBe('AWAITING_APPROVAL');
  });

  it('shows no buttons in read-only mode and refuses the answers posted anyway', async () => {
    const c = await startCluster();
    const server = await serve(c, true);
    const id = await waiting(c);
    const { page } = await openSession(server, id);
    await page.locator('section.wait').waitFor();
    expect(await page.locator('section.wait button').count()).toBe(0);
    expect(await page.innerText('section.wait')).toContain('Read-only');
    const bodies = {
      approve: {},
      reject: { feedback: 'x' },
      edit: { plan: (await c.client.get(id)).session.wait!.plan },
    };
    for (const [action, data] of Object.entries(bodies)) {
      const answer = await page.request.post(`${server.url}/ui/sessions/${id}/${action}`, {
        data,
        headers: { origin: server.url },
      });
      expect(answer.status()).toBe(403);
    }
    expect(await state(c, id)).toBe('AWAITING_APPROVAL');
  });
});
