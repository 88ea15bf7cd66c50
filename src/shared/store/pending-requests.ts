import type { Result } from 'ioredis';
import { chunked } from '../chunked.js';
import { OutboxJob } from '../queues.js';
import { defineScripts, type RedisConnection } from '../redis.js';
import { idempotencyKey, sessionKeys } from './keys.js';

declare module 'ioredis' {
  interface RedisCommander<Context> {
    orqReleaseIdempotencyKey(key: string, sessionId: string): Result<number, Context>;
  }
}

/**
 * What requests leave waiting outside a transition: the jobs a transition wrote to the session's
 * outbox until they are enqueued, and the idempotency keys that name the session a submit made.
 */
export class PendingRequests {
  constructor(
    private readonly redis: RedisConnection,
    private readonly prefix: string,
  ) {
    defineScripts(redis, { orqReleaseIdempotencyKey: [1, RELEASE_KEY_SCRIPT] });
  }

  async readOutbox(sessionId: string): Promise<OutboxJob[]> {
    const raw = await this.redis.hvals(sessionKeys(this.prefix, sessionId).outbox);
    return raw.map((r) => OutboxJob.parse(JSON.parse(r)));
  }

  async removeFromOutbox(sessionId: string, jobIds: string[]): Promise<void> {
    // In slices: one HDEL of ten thousand ids is a write large enough to stall (ADD_BULK_CHUNK).
    for (const slice of chunked(jobIds, 1000)) {
      await this.redis.hdel(sessionKeys(this.prefix, sessionId).outbox, ...slice);
    }
  }

  /** Reserves an idempotency key for a session id; returns the id already holding it, if any. */
  async claimIdempotencyKey(key: string, sessionId: string): Promise<string | undefined> {
    const redisKey = idempotencyKey(this.prefix, key);
    const set = await this.redis.set(redisKey, sessionId, 'NX');
    if (set === 'OK') return undefined;
    return (await this.redis.get(redisKey)) ?? undefined;
  }

  /**
   * Frees an idempotency key, but only while it still names the session: once another submit
   * has claimed it again, the key is that submit's. Returns whether it was freed.
   */
  async releaseIdempotencyKey(key: string, sessionId: string): Promise<boolean> {
    const redisKey = idempotencyKey(this.prefix, key);
    return (await this.redis.orqReleaseIdempotencyKey(redisKey, sessionId)) === 1;
  }
}

/** Deletes an idempotency key only while it still names the session (KEYS[1], ARGV[1]). */
const RELEASE_KEY_SCRIPT = `
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
`;
