import { availableParallelism } from 'node:os';
import { defineConfig } from 'vitest/config';
import { LongestFirst } from './tests/support/sequencer.js';

export default defineConfig({
  test: {
    include: ['tests/**/*.test.ts'],
    globalSetup: ['tests/support/global-redis.ts', 'tests/support/global-cli.ts'],
    // git as in a pod: no global or system config, so no identity but the one a test sets.
    setupFiles: ['tests/support/bare-git.ts'],
    testTimeout: 30_000,
    hookTimeout: 30_000,
    // Integration tests share one redis-server; each test file uses its own key prefix.
    pool: 'forks',
    // A worker runs its files one after another in one module graph: src/, BullMQ, zod... are
    // loaded once per worker, not once per file (which took about half of the files' CPU). No
    // test file mocks modules or leaves state behind that another would read.
    isolate: false,
    // Most test time is spent waiting (on child processes, Redis, lock expiry): one file more
    // than cores, and at least three, keep two cores busy.
    maxWorkers: Math.max(3, availableParallelism() + 1),
    sequence: { sequencer: LongestFirst },
  },
});
