import { Redis } from 'ioredis';
import { describe, expect, inject, it } from 'vitest';
import { freePort } from '../../src/shared/redis-server.js';
import { createConnection, isTransportError, untilReady } from '../../src/shared/redis.js';

describe('untilReady', () => {
  it('waits for a connection that connects or reconnects, and answers at once for a ready one', async () => {
    const redis = createConnection(inject('redisUrl'), 'producer');
    const admin = new Redis(inject('redisUrl'));
    try {
      // Still connecting: a command would fail fast (enableOfflineQueue off); the wait does not.
      expect(redis.status).not.toBe('ready');
      expect(await untilReady(redis)).toBe(true);
      expect(await untilReady(redis)).toBe(true);
      const id = await redis.client('ID');
      const reconnecting = new Promise((resolve) => redis.once('reconnecting', resolve));
      await admin.client('KILL', 'ID', String(id));
      await reconnecting;
      // A producer connection fails fast meanwhile; untilReady waits it out.
      expect(redis.status).not.toBe('ready');
      expect(await untilReady(redis)).toBe(true);
      expect(await redis.ping()).toBe('PONG');
    } finally {
      admin.disconnect();
      redis.disconnect();
    }
  });

  it('gives false on abort, rejects as a lost connection once it ends, and keeps one listener however many wait', async () => {
    const redis = createConnection(`redis://127.0.0.1:${await freePort()}`, 'producer');
    try {
      const before = redis.listenerCount('ready');
      // Twenty callers, each with a signal of its own (one shared signal would warn of its own
      // 20 abort listeners), and one pair of listeners on the connection.
      const stops = Array.from({ length: 20 }, () => new AbortController());
      const waits = stops.map((stop) => untilReady(redis, stop.signal));
      expect(redis.listenerCount('ready')).toBe(before + 1);
      for (const stop of stops) stop.abort();
      expect(await Promise.all(waits)).toEqual(Array.from({ length: 20 }, () => false));

      const ending = untilReady(redis);
      redis.disconnect();
      const error = await ending.then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(isTransportError(error)).toBe(true);
      expect(redis.listenerCount('ready')).toBe(before);
      // Ended for good: a later wait fails at once instead of waiting for ever.
      await expect(untilReady(redis)).rejects.toThrow(/Connection is closed/);
    } finally {
      redis.disconnect();
    }
  });
});
