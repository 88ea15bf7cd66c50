import { beforeEach, type TestContext } from 'vitest';
import { findRedisServer } from '../../src/shared/redis-server.js';

/**
 * Whether this machine has no redis-server on PATH (only Docker, say). The tests of orq's own
 * private Redis (`orq run` without REDIS_URL starts a redis-server) need the binary, whichever
 * way the tests' own servers go: they call needsRedisServer and are skipped where there is none,
 * which the global setup says. CI installs redis-server (.ci/run) and runs them.
 */
export const withoutRedisServer = findRedisServer() === undefined;

/** In a test: skips it without the binary. */
export function needsRedisServer(context: TestContext): void {
  context.skip(withoutRedisServer, 'needs redis-server on PATH (orq run starts one)');
}

/** In a describe: skips each of its tests without the binary. */
export function allNeedRedisServer(): void {
  beforeEach((context) => needsRedisServer(context));
}
