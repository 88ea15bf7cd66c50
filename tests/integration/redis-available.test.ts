import { Redis } from 'ioredis';
import { describe, expect, inject, it } from 'vitest';

describe('the test Redis', () => {
  it('answers and does not evict keys, as BullMQ requires', async () => {
    const redis = new Redis(inject('redisUrl'));
    try {
      expect(await redis.ping()).toBe('PONG');
      const [, policy] = (await redis.config('GET', 'maxmemory-policy')) as string[];
      if (!process.env.ORQ_TEST_REDIS_URL) expect(policy).toBe('noeviction');
    } finally {
      redis.disconnect();
    }
  });
});
