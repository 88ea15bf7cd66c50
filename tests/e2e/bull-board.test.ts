import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium, type Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RunningHttpServer } from '../../src/producers/http/server.js';
import { CHROMIUM_ARGS, chromiumExecutable } from '../support/chromium.js';
import { startCluster, type TestCluster } from '../support/cluster.js';
import { serveApi } from '../support/http.js';

const TOKEN = 'board-token-0123456789abcdef';
const QUEUES = ['plan', 'judge', 'work', 'replan', 'coordinator'];

let cluster: TestCluster;
let server: RunningHttpServer;
let browser: Browser;
let dir: string;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'orq-board-'));
  cluster = await startCluster();
  server = await serveApi(cluster.client, { token: TOKEN });
  // Playwright gives the browser a fresh, empty profile (--user-data-dir) of its own.
  browser = await chromium.launch({
    executablePath: await chromiumExecutable(),
    args: [...CHROMIUM_ARGS],
  });
}, 60_000);

afterAll(async () => {
  await browser?.close();
  await server?.close();
  await cluster?.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe('Bull Board in headless Chromium', () => {
  it("shows orq's five queues after opening the board with the token", async () => {
    const session = await cluster.client.submit({ instruction: 'build the board and the API' });
    await cluster.client.wait(session.id, { timeoutMs: 20_000 });

    const context = await browser.newContext();
    try {
      const page = await context.newPage();
      // Works offline: every request stays on orq's server; and no console errors.
      const elsewhere: string[] = [];
      const errors: string[] = [];
      page.on('request', (request) => {
        if (!request.url().startsWith(server.url)) elsewhere.push(request.url());
      });
      page.on('console', (message) => {
        if (message.type() === 'error') errors.push(message.text());
      });
      page.on('pageerror', (error) => errors.push(error.message));
      const response = await page.goto(`${server.url}/admin/queues?token=${TOKEN}`);
      expect(response?.status()).toBe(200);
      // The redirect drops the token from the address; the cookie carries the credential.
      expect(page.url()).toBe(`${server.url}/admin/queues`);

      // The queue list is rendered by the board's scripts from its API: both need the cookie.
      for (const queue of QUEUES) {
        await page
          .locator(`a[href="/admin/queues/queue/${queue}"]`)
          .first()
          .waitFor({ state: 'visible', timeout: 20_000 });
      }
      const text = await page.innerText('body');
      for (const queue of QUEUES) expect(text).toContain(queue);
      expect(elsewhere).toEqual([]);
      expect(errors).toEqual([]);

      const shot = join(dir, 'bull-board.png');
      await page.screenshot({ path: shot, fullPage: true });
      const png = readFileSync(shot);
      expect(png.length).toBeGreaterThan(1_000);
      expect(png.subarray(0, 8).equals(Buffer.from([137, 80, 78, 71, 13, 10, 26, 10]))).toBe(true);
    } finally {
      await context.close();
    }
  });

  it('refuses the board to a browser without the token', async () => {
    const context = await browser.newContext();
    try {
      const page = await context.newPage();
      const response = await page.goto(`${server.url}/admin/queues`);
      expect(response?.status()).toBe(401);
      const wrong = await page.goto(`${server.url}/admin/queues?token=wrong`);
      expect(wrong?.status()).toBe(401);
    } finally {
      await context.close();
    }
  });
});
