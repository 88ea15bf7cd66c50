import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['tests/**/*.test.ts'],
    globalSetup: ['tests/support/global-redis.ts'],
    testTimeout: 30_000,
    hookTimeout: 30_000,
    // Integration tests share one redis-server; each test file uses its own key prefix.
    pool: 'forks',
  },
});
