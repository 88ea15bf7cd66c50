import { Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import { OrqError } from '../../src/shared/errors.js';
import { asRedisUnavailable } from '../../src/shared/redis.js';

describe('asRedisUnavailable', () => {
  const named = (name: string, message: string) => Object.assign(new Error(message), { name });

  it.each([
    ['connection refused', new Error('connect ECONNREFUSED 127.0.0.1:6379')],
    [
      'no offline queue',
      new Error("Stream isn't writeable and enableOfflineQueue options is false"),
    ],
    // A command in flight when Redis went away (the message does not say MaxRetriesPerRequest).
    [
      'retries used up',
      named(
        'MaxRetriesPerRequestError',
        'Reached the max retries per request limit (which is 1). Refer to "maxRetriesPerRequest" option for details.',
      ),
    ],
    ['closed connection', new Error('Connection is closed.')],
  ])('turns %s into REDIS_UNAVAILABLE', (_, error) => {
    const mapped = asRedisUnavailable(error);
    expect(mapped).toBeInstanceOf(OrqError);
    expect(mapped).toMatchObject({ code: 'REDIS_UNAVAILABLE', cause: error });
  });

  it("names REDIS_URL in its hint, or createClient's connection option for the client's calls", () => {
    const refused = new Error('connect ECONNREFUSED 127.0.0.1:6380');
    expect(asRedisUnavailable(refused)).toMatchObject({
      hint: 'Start Redis or set REDIS_URL to a reachable server.',
    });
    expect(asRedisUnavailable(refused, 'connection')).toMatchObject({
      hint: expect.stringContaining('Check the `connection` option of createClient') as string,
    });
  });

  it("says where Redis was looked for and why in words, keeping ioredis's text in the cause", () => {
    const redis = new Redis({ host: '10.1.2.3', port: 6390, lazyConnect: true });
    const offline = new Error("Stream isn't writeable and enableOfflineQueue options is false");
    const mapped = asRedisUnavailable(offline, 'REDIS_URL', redis) as OrqError;
    expect(mapped.summary).toBe(
      'Redis at 10.1.2.3:6390 is unreachable (not connected, reconnecting)',
    );
    expect(mapped.message).not.toMatch(/enableOfflineQueue|Stream/);
    expect(mapped.details).toEqual({ address: '10.1.2.3:6390' });
    expect(mapped.cause).toBe(offline);
    const refused = asRedisUnavailable(
      new Error('connect ECONNREFUSED 10.1.2.3:6390'),
      'REDIS_URL',
      redis,
    );
    expect((refused as OrqError).summary).toBe(
      'Redis at 10.1.2.3:6390 is unreachable (connection refused)',
    );
    redis.disconnect();
  });

  it('leaves other errors, and orq errors, as they are', () => {
    const other = new Error('WRONGTYPE Operation against a key holding the wrong kind of value');
    expect(asRedisUnavailable(other)).toBe(other);
    const own = new OrqError('NOT_FOUND', 'no such session');
    expect(asRedisUnavailable(own)).toBe(own);
  });
});
