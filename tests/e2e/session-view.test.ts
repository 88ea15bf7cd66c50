import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium, type Browser, type BrowserContext, type Page } from 'playwright-core';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { ScenarioInput } from '../../src/shared/config/scenario.js';
import type { RoleModels } from '../../src/workers/llm/types.js';
import type { RunningHttpServer } from '../../src/producers/http/server.js';
import { CHROMIUM_ARGS, chromiumExecutable } from '../support/chromium.js';
import { clusterPerTest, type TestCluster } from '../support/cluster.js';
import {
  deferred,
  eventually,
  exampleScenario,
  recordingModels,
  scenarioDir,
} from '../support/scenarios.js';
import { serveApi } from '../support/http.js';

const TOKEN = 'view-token-0123456789abcdef';
const TIMEOUT = 20_000;
/** Set to a folder (docs/images) to keep the screenshots the tests take. */
const SHOTS = process.env.ORQ_SCREENSHOTS_DIR;

const startCluster = clusterPerTest();
const scenarios = scenarioDir();
let browser: Browser;
let shotDir: string;
const servers: RunningHttpServer[] = [];
const contexts: BrowserContext[] = [];

beforeAll(async () => {
  shotDir = SHOTS ?? mkdtempSync(join(tmpdir(), 'orq-view-'));
  mkdirSync(shotDir, { recursive: true });
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
  scenarios.cleanup();
  if (!SHOTS && shotDir) rmSync(shotDir, { recursive: true, force: true });
});

async function serve(
  cluster: TestCluster,
  options: { readOnly?: boolean } = {},
): Promise<RunningHttpServer> {
  const server = await serveApi(cluster.client, {
    token: TOKEN,
    readOnlyBoard: options.readOnly ?? false,
  });
  servers.push(server);
  return server;
}

/** A page whose console errors and page errors are collected in `errors`. */
async function openPage(
  options: { viewport?: { width: number; height: number } } = {},
): Promise<{ page: Page; errors: string[] }> {
  const context = await browser.newContext(options.viewport ? { viewport: options.viewport } : {});
  contexts.push(context);
  const page = await context.newPage();
  const errors: string[] = [];
  page.on('console', (message) => {
    if (message.type() === 'error') errors.push(message.text());
  });
  page.on('pageerror', (error) => errors.push(error.message));
  return { page, errors };
}

/** Signs in with the token once (it sets the cookie), then opens `path`. */
async function signIn(page: Page, server: RunningHttpServer, path: string): Promise<void> {
  const response = await page.goto(`${server.url}/ui?token=${TOKEN}`);
  expect(response?.status()).toBe(200);
  if (path !== '/ui') await page.goto(`${server.url}${path}`);
}

async function submit(cluster: TestCluster, scenario: string, instruction: string) {
  const session = await cluster.client.submit({ instruction, config: { llm: { scenario } } });
  return session.id;
}

const nodeState = (page: Page, taskId: string) =>
  page.locator(`svg.graph a.node[data-task="${taskId}"]`).getAttribute('data-state');

async function edges(page: Page): Promise<string[]> {
  const found = await page
    .locator('svg.graph path.edge')
    .evaluateAll((paths) =>
      paths.map(
        (p) =>
          `${p.getAttribute('data-from')}->${p.getAttribute('data-to')}:${p.classList.contains('edge-replaced') ? 'replaced' : 'depends'}`,
      ),
    );
  return found.sort();
}

/** Holds the execution of one task of every session until `release`. */
function holding(scenario: string, taskId: string): { models: RoleModels; release(): void } {
  const gate = deferred();
  const { models } = recordingModels(scenario, {
    beforeExecute: (request) => (request.task.id === taskId ? gate.promise : undefined),
  });
  return { models, release: () => gate.resolve() };
}

describe('the session view in headless Chromium', () => {
  it('lists sessions and draws a diamond with its states, without console errors', async () => {
    const cluster = await startCluster();
    const server = await serve(cluster);
    const id = await submit(cluster, exampleScenario('diamond.yaml'), 'Add a search feature');
    await cluster.client.wait(id, { timeoutMs: TIMEOUT });

    const { page, errors } = await openPage();
    await signIn(page, server, '/ui');
    expect(page.url()).toBe(`${server.url}/ui`);
    const row = page.locator(`tr[data-session="${id}"]`);
    await expect(row.getAttribute('data-state')).resolves.toBe('COMPLETED');
    expect(await row.innerText()).toContain('4/4');
    expect(await row.innerText()).toContain('Add a search feature');
    await page.screenshot({ path: join(shotDir, 'session-list.png'), fullPage: true });

    await page.click(`a[href="/ui/sessions/${id}"]`);
    await page.locator('svg.graph').waitFor();
    for (const task of ['A', 'B', 'C', 'D']) expect(await nodeState(page, task)).toBe('DONE');
    expect(await edges(page)).toEqual([
      'A->B:depends',
      'A->C:depends',
      'B->D:depends',
      'C->D:depends',
    ]);
    const story = await page.locator('section.story').innerText();
    expect(story).toContain('Plan attempt 0');
    expect(story).toContain('refinement:accept');
    expect(await page.locator('section[aria-label="result"]').innerText()).toContain('Complete');
    await page.screenshot({ path: join(shotDir, 'session.png'), fullPage: true });

    await page.click(`svg.graph a.node[data-task="D"]`);
    await page.locator('#task-output').waitFor();
    expect(await page.locator('#task-output').innerText()).toContain(
      'Done: Test search end to end',
    );
    const job = page.locator(
      `a[href="/admin/queues/queue/work/${encodeURIComponent(`work|${id}|D|1`)}"]`,
    );
    expect(await job.count()).toBe(1);
    await page.screenshot({ path: join(shotDir, 'task.png'), fullPage: true });
    expect(errors).toEqual([]);

    // From the task to its job in Bull Board, and back: the job's header links the task's page.
    await job.click();
    const back = page.locator(`a[href="/ui/sessions/${id}/tasks/D"]`).first();
    await back.waitFor({ timeout: TIMEOUT });
    expect(await back.innerText()).toBe('task in orq');
    const [taskPage] = await Promise.all([page.context().waitForEvent('page'), back.click()]);
    await taskPage.locator('#task-output').waitFor({ timeout: TIMEOUT });
    expect(await taskPage.locator('#task-output').innerText()).toContain(
      'Done: Test search end to end',
    );
    expect(errors).toEqual([]);
  });

  it('draws a replaced task, the subtasks that replaced it and the dependent rewired to them', async () => {
    const replan: ScenarioInput = {
      plans: [
        {
          summary: 'Login with validation',
          tasks: [
            { id: 't1', title: 'Build the login form', acceptance: 'a', context: 'c' },
            {
              id: 't2',
              title: 'Validate input',
              acceptance: 'b',
              context: 'c',
              dependencies: ['t1'],
            },
            { id: 't3', title: 'Ship it', acceptance: 'c', context: 'c', dependencies: ['t2'] },
          ],
        },
      ],
      planJudgements: [{ score: 85, isAcceptable: true }],
      tasks: {
        t2: {
          judgements: [{ success: false, shouldReplan: true, reason: 'rules never defined' }],
          replan: {
            reason: 'Define the rules first',
            tasks: [
              { id: 't2-a', title: 'Define the rules', acceptance: 'r', context: 'c' },
              {
                id: 't2-b',
                title: 'Validate input',
                acceptance: 'v',
                context: 'c',
                dependencies: ['t2-a'],
              },
            ],
          },
        },
      },
    };
    const cluster = await startCluster();
    const server = await serve(cluster);
    const id = await submit(cluster, scenarios.write('replan', replan), 'Login with validation');
    const view = await cluster.client.wait(id, { timeoutMs: TIMEOUT });
    expect(view.session.state).toBe('COMPLETED');
    // The replanner's subtasks get ids of orq's own, kept on the replaced task.
    const [first, second] = view.tasks.find((t) => t.id === 't2')!.replanningInfo!.replacedBy!;

    const { page, errors } = await openPage();
    await signIn(page, server, `/ui/sessions/${id}`);
    await page.locator('svg.graph').waitFor();
    expect(await nodeState(page, 't2')).toBe('REPLACED_BY_REPLAN');
    await page.locator('.graph-box').screenshot({ path: join(shotDir, 'graph-replan.png') });
    for (const task of ['t1', first!, second!, 't3'])
      expect(await nodeState(page, task)).toBe('DONE');
    expect(await edges(page)).toEqual(
      [
        't1->t2:depends',
        // The subtasks inherit the replaced task's dependencies.
        `t1->${first}:depends`,
        `t1->${second}:depends`,
        `t2->${first}:replaced`,
        `t2->${second}:replaced`,
        `${first}->${second}:depends`,
        `${second}->t3:depends`,
      ].sort(),
    );
    expect(errors).toEqual([]);
  });

  it('updates the graph when a task finishes, without a reload', async () => {
    const hold = holding(exampleScenario('diamond.yaml'), 'D');
    const cluster = await startCluster({ models: hold.models });
    const server = await serve(cluster);
    try {
      const id = await submit(cluster, exampleScenario('diamond.yaml'), 'Add a search feature');
      await eventually(async () => {
        const view = await cluster.client.get(id);
        return view.tasks.find((t) => t.id === 'D')?.state === 'RUNNING' ? true : undefined;
      }, 'D to run');

      const { page, errors } = await openPage();
      await signIn(page, server, `/ui/sessions/${id}`);
      expect(await nodeState(page, 'D')).toBe('RUNNING');
      // A marker a reload would wipe out.
      await page.evaluate(() => ((globalThis as unknown as { marker: number }).marker = 42));
      hold.release();
      await page
        .locator('svg.graph a.node[data-task="D"][data-state="DONE"]')
        .waitFor({ timeout: TIMEOUT });
      await page.locator('h1 .state-COMPLETED').waitFor({ timeout: TIMEOUT });
      expect(await page.evaluate(() => (globalThis as unknown as { marker: number }).marker)).toBe(
        42,
      );
      expect(errors).toEqual([]);
    } finally {
      hold.release();
    }
  });
  it('fits a phone screen and is reachable from the keyboard', async () => {
    const cluster = await startCluster();
    const server = await serve(cluster);
    const id = await submit(cluster, exampleScenario('diamond.yaml'), 'Add a search feature');
    await cluster.client.wait(id, { timeoutMs: TIMEOUT });

    const { page, errors } = await openPage({ viewport: { width: 390, height: 844 } });
    for (const path of ['/ui', `/ui/sessions/${id}`]) {
      await signIn(page, server, path);
      // The page itself never scrolls sideways: wide tables and the graph scroll in their boxes.
      const overflow = await page.evaluate<number>(
        'document.documentElement.scrollWidth - document.documentElement.clientWidth',
      );
      expect(overflow).toBeLessThanOrEqual(0);
    }
    await page.screenshot({ path: join(shotDir, 'session-phone.png'), fullPage: true });

    // Tab until the graph's node for D has the focus, then open it with Enter.
    let focused: string | null = null;
    for (let i = 0; i < 40 && focused !== 'D'; i += 1) {
      await page.keyboard.press('Tab');
      focused = await page.evaluate<string | null>(
        "document.activeElement?.getAttribute('data-task') ?? null",
      );
    }
    expect(focused).toBe('D');
    await page.keyboard.press('Enter');
    await page.waitForURL(`${server.url}/ui/sessions/${id}/tasks/D`);
    expect(errors).toEqual([]);
  });
  it("tells the plan's story: attempts, scores, their direction, the feedback and the terms", async () => {
    const cluster = await startCluster();
    const server = await serve(cluster);
    const { page, errors } = await openPage();
    await signIn(page, server, '/ui');
    const path = scenarios.write('improves', {
      planJudgements: [
        { score: 55, isAcceptable: false, issues: ['Input validation is missing'] },
        { score: 80, isAcceptable: true },
      ],
    });
    const id = await submit(cluster, path, 'Implement the login form with input validation');
    // The list, already open, shows the new session without a reload.
    await page.locator(`tr[data-session="${id}"]`).waitFor({ timeout: TIMEOUT });
    await cluster.client.wait(id, { timeoutMs: TIMEOUT });

    await page.goto(`${server.url}/ui/sessions/${id}`);
    const story = page.locator('section.story');
    await story.waitFor();
    const attempts = await story
      .locator('article.entry-plan')
      .evaluateAll((plans) => plans.map((p) => p.getAttribute('data-attempt')));
    expect(attempts).toEqual(['0', '1']);
    const replan = story.locator('article[data-decision="refinement:replan"]');
    expect(await replan.locator('dd[data-field="score"]').innerText()).toBe('55');
    expect(await replan.locator('dd[data-field="issues"]').innerText()).toBe(
      'Input validation is missing',
    );
    const accept = story.locator('article[data-decision="refinement:accept"]');
    expect(await accept.locator('dd[data-field="score"]').innerText()).toBe('80');
    expect(await accept.locator('dd[data-field="previousScore"]').innerText()).toBe('55');
    expect(await accept.locator('dd[data-field="scoreDirection"]').innerText()).toBe('improved');
    // The replan's structure check, with the required terms it kept and lost.
    const structure = story.locator('article[data-decision="structure:valid"]');
    expect(await structure.locator('dd[data-field="preserved"]').count()).toBe(1);
    expect(await structure.locator('dd[data-field="missing"]').count()).toBe(1);
    expect(await structure.locator('dd[data-field="hasCircularDependency"]').innerText()).toBe(
      'false',
    );
    expect(errors).toEqual([]);
  });
});

describe('actions from the session view', () => {
  it('resumes a blocked session after the confirmation', async () => {
    const cluster = await startCluster();
    const server = await serve(cluster);
    const id = await submit(cluster, exampleScenario('blocked-task.yaml'), 'Deploy the service');
    await eventually(
      async () => ((await cluster.client.get(id)).session.state === 'BLOCKED' ? true : undefined),
      'the session to block',
    );
    const { page, errors } = await openPage();
    await signIn(page, server, `/ui/sessions/${id}`);
    const dialogs: string[] = [];
    page.on('dialog', (dialog) => {
      dialogs.push(dialog.message());
      void dialog.accept();
    });
    await page.getByRole('button', { name: 'Resume: retry' }).click();
    await page.locator('h1 .state-COMPLETED').waitFor({ timeout: TIMEOUT });
    expect(dialogs).toEqual(['Retry the blocked tasks?']);
    expect(await nodeState(page, 't2')).toBe('DONE');
    expect(errors).toEqual([]);
  });

  it('cancels a running session after the confirmation, and does nothing when it is declined', async () => {
    const hold = holding(exampleScenario('diamond.yaml'), 'A');
    const cluster = await startCluster({ models: hold.models });
    const server = await serve(cluster);
    try {
      const id = await submit(cluster, exampleScenario('diamond.yaml'), 'Add a search feature');
      const { page } = await openPage();
      await signIn(page, server, `/ui/sessions/${id}`);
      let accept = false;
      page.on('dialog', (dialog) => void (accept ? dialog.accept() : dialog.dismiss()));
      await page.getByRole('button', { name: 'Cancel session' }).click();
      // Declined: nothing was sent.
      expect(await page.locator('.action-status').innerText()).toBe('');
      expect((await cluster.client.get(id)).session.state).not.toBe('CANCELLED');
      accept = true;
      await page.getByRole('button', { name: 'Cancel session' }).click();
      await page.locator('h1 .state-CANCELLED').waitFor({ timeout: TIMEOUT });
      expect((await cluster.client.get(id)).session.state).toBe('CANCELLED');
    } finally {
      hold.release();
    }
  });

  it('refuses actions without the token, and in read-only mode', async () => {
    const cluster = await startCluster();
    const server = await serve(cluster);
    const readOnly = await serve(cluster, { readOnly: true });
    const id = await submit(cluster, exampleScenario('blocked-task.yaml'), 'Deploy the service');
    await eventually(
      async () => ((await cluster.client.get(id)).session.state === 'BLOCKED' ? true : undefined),
      'the session to block',
    );

    // No cookie, no bearer: the pages and the actions answer 401.
    const { page: stranger } = await openPage();
    expect((await stranger.goto(`${server.url}/ui/sessions/${id}`))?.status()).toBe(401);
    for (const action of ['resume', 'cancel']) {
      const answer = await stranger.request.post(`${server.url}/ui/sessions/${id}/${action}`, {
        data: {},
      });
      expect(answer.status()).toBe(401);
    }

    // Read-only: the page shows no actions, and posting them anyway is refused.
    const { page, errors } = await openPage();
    await signIn(page, readOnly, `/ui/sessions/${id}`);
    await page.locator('svg.graph').waitFor();
    expect(await page.locator('button[data-action]').count()).toBe(0);
    expect(await page.innerText('main')).toContain('Read-only');
    for (const action of ['resume', 'cancel']) {
      const answer = await page.request.post(`${readOnly.url}/ui/sessions/${id}/${action}`, {
        data: {},
      });
      expect(answer.status()).toBe(403);
    }
    expect((await cluster.client.get(id)).session.state).toBe('BLOCKED');

    // An unknown session or task is a page that says so, with the way back.
    for (const path of ['/ui/sessions/no-such-session', `/ui/sessions/${id}/tasks/no-such-task`]) {
      const missing = await page.request.get(`${readOnly.url}${path}`);
      expect(missing.status()).toBe(404);
      expect(missing.headers()['content-type']).toContain('text/html');
      const text = await missing.text();
      expect(text).toMatch(/not found|has no task/);
      expect(text).toContain('<a href="/ui">All sessions</a>');
    }
    expect(errors).toEqual([]);
  });
});
