import { availableParallelism } from 'node:os';
import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['tests/**/*.test.ts'],
    globalSetup: ['tests/support/global-redis.ts', 'tests/support/global-cli.ts'],
    testTimeout: 30_000,
    hookTimeout: 30_000,
    // Integration tests share one redis-server; each test file uses its own key prefix.
    pool: 'forks',
    // Most test time is spent waiting (on child processes, Redis, lock expiry), so two files
    // at once even on 2 cores, where Vitest's default (cores - 1) would run one at a time.
    maxWorkers: Math.max(2, availableParallelism() - 1),
  },
});
