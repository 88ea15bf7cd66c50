import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TestProject } from 'vitest/node';
import { startPrivateRedis, type PrivateRedis } from '../../src/shared/redis-server.js';

declare module 'vitest' {
  export interface ProvidedContext {
    redisUrl: string;
  }
}

let redis: PrivateRedis | undefined;
let dir: string | undefined;

/**
 * One private redis-server for the whole test run, on a free port, so no test depends on a
 * Redis the machine may or may not have. ORQ_TEST_REDIS_URL points the tests at another one.
 */
export async function setup(project: TestProject): Promise<void> {
  const external = process.env.ORQ_TEST_REDIS_URL;
  if (external) {
    project.provide('redisUrl', external);
    return;
  }
  dir = mkdtempSync(join(tmpdir(), 'orq-test-redis-'));
  redis = await startPrivateRedis({ dir, appendonly: false });
  project.provide('redisUrl', redis.url);
}

export async function teardown(): Promise<void> {
  await redis?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
}
