import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestRedis, type TestRedis } from '../support/test-redis.js';
import { orq, spawnOrq, stopProcess, waitForOutput } from '../support/cli.js';

// A Redis that may evict keys (and so lose jobs): orq says so once, BullMQ's own console
// warning (once per connection it opens) does not reach the output.

let redis: TestRedis;
/** The same policy on a server that refuses CONFIG, as managed services (ElastiCache) do. */
let noConfig: TestRedis;
let dir: string;
let env: Record<string, string>;
beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'orq-evicting-redis-'));
  const lru = ['--maxmemory-policy', 'allkeys-lru'];
  redis = await startTestRedis({ dir: join(dir, 'a'), args: lru });
  noConfig = await startTestRedis({
    dir: join(dir, 'b'),
    args: [...lru, '--rename-command', 'CONFIG', 'CONFIG-HIDDEN-FROM-ORQ'],
  });
  env = { REDIS_URL: redis.url, ORQ_PREFIX: 'evict' };
});
afterAll(async () => {
  await redis?.stop();
  await noConfig?.stop();
  rmSync(dir, { recursive: true, force: true });
});

describe('a Redis whose maxmemory-policy is not noeviction', () => {
  const pod = ['start', '--roles', 'planner,judge,worker,replanner,coordinator'];
  it.each([
    ['a pod', pod, 'roles started', false],
    ['a pod on a Redis that refuses CONFIG', pod, 'roles started', true],
    ['the dashboard', ['dashboard', '--port', '0'], 'OpenAPI at', false],
  ])('%s logs it once, as a structured warning', async (_, args, ready, refusesConfig) => {
    const child = spawnOrq(args, {
      env: { ...env, ...(refusesConfig ? { REDIS_URL: noConfig.url } : {}) },
    });
    // Logs and BullMQ's console both: whichever stream each goes to.
    let output = '';
    for (const stream of [child.stdout, child.stderr]) {
      stream?.on('data', (chunk: Buffer) => (output += chunk.toString()));
    }
    await waitForOutput(child, ready, 30_000);
    expect(await stopProcess(child)).toBe(0);
    expect(output).not.toContain('IMPORTANT! Eviction policy');
    const warnings = output
      .split('\n')
      .filter((line) => line.includes('maxmemory-policy is not noeviction'));
    expect(warnings).toHaveLength(1);
    expect(JSON.parse(warnings[0] ?? '{}')).toMatchObject({ level: 40, policy: 'allkeys-lru' });
  });

  it("a CLI command prints none of BullMQ's warnings", async () => {
    const status = await orq(['status'], { env });
    expect(status.code, status.stderr).toBe(0);
    expect(status.stderr).toBe('');
  });
});
