import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TestProject } from 'vitest/node';
import { findRedisServer } from '../../src/shared/redis-server.js';
import {
  chooseRedisServers,
  describeRedisServers,
  startTestRedis,
  useRedisServers,
  type RedisServers,
  type TestRedis,
} from './test-redis.js';
import { noContainerEngine, removeRunContainers } from './containers.js';

declare module 'vitest' {
  export interface ProvidedContext {
    redisUrl: string;
  }
}

let servers: RedisServers | undefined;
let redis: TestRedis | undefined;
let dir: string | undefined;

/**
 * Decides once how the run gets its Redis servers (tests/support/test-redis.ts) and says which,
 * then starts the one Redis the test files share, on a free port. ORQ_TEST_REDIS_URL points the
 * shared tests at another one.
 */
export async function setup(project: TestProject): Promise<void> {
  servers = await chooseRedisServers();
  useRedisServers(servers);
  project.provide('redisServers', servers);
  process.stderr.write(`${describeRedisServers(servers)}\n`);
  if (!findRedisServer()) {
    process.stderr.write(
      "tests: no redis-server on PATH: the tests of orq's own private Redis (orq run without " +
        'REDIS_URL starts one) are skipped\n',
    );
  }
  const external = process.env.ORQ_TEST_REDIS_URL;
  if (external) {
    project.provide('redisUrl', external);
    return;
  }
  dir = mkdtempSync(join(tmpdir(), 'orq-test-redis-'));
  const started = Date.now();
  redis = await startTestRedis({ dir, appendonly: false });
  process.stderr.write(`tests: the shared Redis answered in ${Date.now() - started} ms\n`);
  project.provide('redisUrl', redis.url);
}

export async function teardown(): Promise<void> {
  await redis?.stop();
  // The test files' containers too, stopped ones included (Ryuk is off); a run of binaries
  // may have started one-shot ones.
  if (servers && !(await noContainerEngine())) await removeRunContainers(servers.runId);
  if (dir) rmSync(dir, { recursive: true, force: true });
}
