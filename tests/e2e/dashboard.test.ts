import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { ChildProcess } from 'node:child_process';
import { afterEach, describe, expect, inject, it, vi } from 'vitest';
import { freePort } from '../../src/shared/redis-server.js';
import { needsRedisServer } from '../support/redis-binary.js';
import { startTestRedis } from '../support/test-redis.js';
import { orq, spawnOrq, stopProcess, waitForOutput } from '../support/cli.js';

const children: ChildProcess[] = [];
afterEach(async () => {
  await Promise.all(children.splice(0).map((c) => stopProcess(c)));
});

describe('orq dashboard', () => {
  it('serves the HTTP API, the session view and Bull Board behind the token until SIGTERM', async () => {
    const token = randomUUID();
    const env = {
      REDIS_URL: inject('redisUrl'),
      ORQ_PREFIX: `d${randomUUID().slice(0, 8)}`,
      ORQ_API_TOKEN: token,
    };
    const child = spawnOrq(['dashboard', '--port', '0'], { env });
    children.push(child);
    let stdout = '';
    let stderr = '';
    child.stdout?.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
    child.stderr?.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    await waitForOutput(child, 'OpenAPI at', 30_000);
    // Which models the sessions submitted here get: none, on stderr.
    await vi.waitFor(
      () =>
        expect(stderr).toContain(
          'orq: no model configured: the builtin provider (a rule set, not an LLM) plans, judges and runs the sessions submitted here',
        ),
      { timeout: 10_000, interval: 50 },
    );

    const url = /HTTP API on (http:\/\/127\.0\.0\.1:\d+)/.exec(stdout)?.[1];
    expect(url, stdout).toBeDefined();
    expect(stdout).toContain(`${url}/admin/queues?token=<ORQ_API_TOKEN>`);
    expect(stdout).toContain(`orq: API reference at ${url}/docs?token=<ORQ_API_TOKEN>`);
    expect(stdout).not.toContain(token);

    expect((await fetch(`${url}/healthz`)).status).toBe(200);
    expect((await fetch(`${url}/sessions`)).status).toBe(401);
    const list = await fetch(`${url}/sessions`, { headers: { authorization: `Bearer ${token}` } });
    expect(list.status).toBe(200);
    expect(await list.json()).toEqual([]);

    // The session view, with its script served from the files beside the built modules.
    expect(stdout).toContain(`orq: sessions at ${url}/ui?token=<ORQ_API_TOKEN>`);
    const bearer = { headers: { authorization: `Bearer ${token}` } };
    expect((await fetch(`${url}/ui`)).status).toBe(401);
    const view = await fetch(`${url}/ui`, bearer);
    expect(view.status).toBe(200);
    expect(await view.text()).toContain('<h1>Sessions</h1>');
    const script = await fetch(`${url}/ui/assets/ui.js`, bearer);
    expect(script.status).toBe(200);
    expect(await script.text()).toContain('new EventSource(');

    expect(await stopProcess(child)).toBe(0);
  });

  it('without REDIS_URL says it serves the private Redis of its directory, which it started', async (context) => {
    needsRedisServer(context);
    const cwd = mkdtempSync(join(tmpdir(), 'orq-dashboard-private-'));
    try {
      const child = spawnOrq(['dashboard', '--port', '0'], { cwd });
      children.push(child);
      let stdout = '';
      child.stdout?.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
      await waitForOutput(child, 'Set REDIS_URL', 30_000);
      expect(stdout).toContain(
        `orq: REDIS_URL is not set: serving the private Redis in .orq/redis (started for this dashboard) at redis://127.0.0.1:`,
      );
      expect(stdout).toContain('only `orq run` and the `--run` commands in this directory run');
      expect(await stopProcess(child)).toBe(0);
    } finally {
      rmSync(cwd, { recursive: true, force: true });
    }
  });

  it('logs a Redis outage once when it starts and once when Redis is back, not per reconnect', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'orq-dashboard-outage-'));
    const redis = await startTestRedis({ dir, appendonly: false });
    try {
      const child = spawnOrq(['dashboard', '--port', '0'], {
        env: { REDIS_URL: redis.url, ORQ_PREFIX: `d${randomUUID().slice(0, 8)}` },
      });
      children.push(child);
      let stderr = '';
      child.stderr?.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
      await waitForOutput(child, 'OpenAPI at', 30_000);

      await redis.stop();
      const logged = (text: string) =>
        vi.waitFor(() => expect(stderr).toContain(text), { timeout: 20_000, interval: 100 });
      await logged('redis unreachable; reconnecting');
      // A few failed reconnects (every 200, 400 ... 2000 ms), none of them logged.
      await new Promise((r) => setTimeout(r, 3_000));
      await redis.start();
      await logged('redis connection restored');

      const lines = stderr.trim().split('\n');
      expect(
        lines.filter((l) => l.includes('redis unreachable')),
        stderr,
      ).toHaveLength(1);
      expect(
        lines.filter((l) => l.includes('redis connection restored')),
        stderr,
      ).toHaveLength(1);
      expect(await stopProcess(child)).toBe(0);
    } finally {
      await redis.stop();
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('refuses a non-loopback address without ORQ_API_TOKEN (exit code 2)', async () => {
    const result = await orq(['dashboard', '--host', '0.0.0.0', '--port', '0'], {
      env: { REDIS_URL: inject('redisUrl') },
    });
    expect(result.code).toBe(2);
    expect(result.stderr).toMatch(/refusing to listen on 0\.0\.0\.0/);
    expect(result.stderr).toContain('ORQ_API_TOKEN');
  });

  it('says so before it connects: the same exit code 2 with Redis unreachable, and for a short token', async () => {
    const unreachable = `redis://127.0.0.1:${await freePort()}`;
    const [noToken, shortToken] = await Promise.all([
      orq(['dashboard', '--host', '0.0.0.0', '--port', '0'], { env: { REDIS_URL: unreachable } }),
      orq(['dashboard', '--port', '0'], {
        env: { REDIS_URL: unreachable, ORQ_API_TOKEN: 'hunter2' },
      }),
    ]);
    expect(noToken.code, noToken.stderr).toBe(2);
    expect(noToken.stderr).toMatch(/refusing to listen on 0\.0\.0\.0/);
    expect(shortToken.code, shortToken.stderr).toBe(2);
    expect(shortToken.stderr).toContain('has 7 characters; at least 16 are needed');
  });
});
