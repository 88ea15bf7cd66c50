import { chromium, type Browser, type BrowserContext, type Page } from 'playwright-core';
import { afterAll, afterEach, beforeAll, expect } from 'vitest';
import type { OrqClient } from '../../src/producers/client.js';
import type { RunningHttpServer } from '../../src/producers/http/server.js';
import { CHROMIUM_ARGS, chromiumExecutable } from './chromium.js';
import { serveApi } from './http.js';

/** The API token and the operator token of the servers sessionViewBrowser serves. */
export const VIEW_TOKEN = 'view-token-0123456789abcdef';
export const VIEW_OPERATOR = 'view-operator-0123456789abcdef';

export interface ViewPage {
  page: Page;
  /** Page errors and console errors, in order. */
  errors: string[];
  /** Every confirmation the page asked, each accepted. */
  dialogs: string[];
}

/**
 * One headless Chromium for a test file of the session view, and what each test serves and
 * opens, closed after the test. Registers its own beforeAll/afterEach/afterAll.
 */
export function sessionViewBrowser(): {
  serve(client: OrqClient, readOnly?: boolean): Promise<RunningHttpServer>;
  openSession(server: RunningHttpServer, id: string, token?: string): Promise<ViewPage>;
} {
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

  return {
    async serve(client, readOnly = false) {
      const server = await serveApi(client, {
        token: VIEW_TOKEN,
        operatorToken: VIEW_OPERATOR,
        readOnlyBoard: readOnly,
      });
      servers.push(server);
      return server;
    },
    /** A page signed in with `token`, at the session's view. */
    async openSession(server, id, token = VIEW_OPERATOR) {
      const context = await browser.newContext();
      contexts.push(context);
      const page = await context.newPage();
      const errors: string[] = [];
      const dialogs: string[] = [];
      page.on('pageerror', (error) => errors.push(error.message));
      page.on('console', (m) => {
        if (m.type() === 'error') errors.push(m.text());
      });
      page.on('dialog', (dialog) => {
        dialogs.push(dialog.message());
        void dialog.accept();
      });
      expect((await page.goto(`${server.url}/ui?token=${token}`))?.status()).toBe(200);
      await page.goto(`${server.url}/ui/sessions/${id}`);
      return { page, errors, dialogs };
    },
  };
}
