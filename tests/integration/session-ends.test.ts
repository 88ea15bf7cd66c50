import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, inject, it, vi } from 'vitest';
import type { SessionEnded } from '../../src/shared/domain/session.js';
import { createLogger } from '../../src/shared/logger.js';
import { sessionEndedChannel } from '../../src/shared/store/keys.js';
import { followSessionEnds } from '../../src/workers/session-ends.js';

let redis: Redis;
beforeAll(() => {
  redis = new Redis(inject('redisUrl'));
});
afterAll(() => redis.disconnect());

describe('following the announcements of session ends', () => {
  it('hands on valid announcements of its prefix, and logs and skips malformed ones', async () => {
    const prefix = `se${randomUUID().slice(0, 8)}`;
    const ends: SessionEnded[] = [];
    const warnings: string[] = [];
    const logger = createLogger({ level: 'warn' });
    vi.spyOn(logger, 'warn').mockImplementation(((_: unknown, message: string) => {
      warnings.push(message);
    }) as never);
    const stop = await followSessionEnds(redis, prefix, (ended) => ends.push(ended), logger);
    try {
      const channel = sessionEndedChannel(prefix);
      await redis.publish(channel, 'not json');
      await redis.publish(channel, JSON.stringify({ sessionId: 's1', state: 'SLEEPING' }));
      await redis.publish(
        sessionEndedChannel('another-prefix'),
        JSON.stringify({ sessionId: 's2', state: 'FAILED' }),
      );
      await redis.publish(channel, JSON.stringify({ sessionId: 's3', state: 'CANCELLED' }));
      await vi.waitFor(() => expect(ends).toEqual([{ sessionId: 's3', state: 'CANCELLED' }]));
      expect(warnings).toEqual(['ignoring a malformed message', 'ignoring a malformed message']);
    } finally {
      stop();
    }
  });
});
