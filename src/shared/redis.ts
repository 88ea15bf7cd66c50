import { Redis, type RedisOptions } from 'ioredis';
import { OrqError } from './errors.js';
import type { Logger } from './logger.js';

export type ConnectionInput = string | RedisOptions;

/**
 * Connections follow BullMQ's guidance: consumers retry forever (`maxRetriesPerRequest: null`)
 * so blocking reads survive a Redis restart; producers fail fast so a caller learns at once
 * that Redis is down instead of hanging.
 */
export function createConnection(
  input: ConnectionInput,
  kind: 'consumer' | 'producer',
  logger?: Logger,
): Redis {
  const common: RedisOptions =
    kind === 'consumer'
      ? { maxRetriesPerRequest: null, enableReadyCheck: true }
      : {
          maxRetriesPerRequest: 1,
          enableOfflineQueue: false,
          connectTimeout: 5_000,
          retryStrategy: (times) => Math.min(times * 200, 2_000),
        };
  const redis =
    typeof input === 'string'
      ? new Redis(input, { ...common, lazyConnect: false })
      : new Redis({ ...input, ...common });
  redis.on('error', (error: Error) => {
    logger?.warn({ err: error.message, kind }, 'redis connection error');
  });
  return redis;
}

/** Waits until the connection is ready, or throws REDIS_UNAVAILABLE with the address. */
export async function ensureConnected(redis: Redis, timeoutMs = 5_000): Promise<void> {
  if (redis.status === 'ready') return;
  const where = `${redis.options.host ?? '?'}:${redis.options.port ?? '?'}`;
  const unavailable = (reason: string) =>
    new OrqError('REDIS_UNAVAILABLE', `Redis at ${where} is unreachable (${reason})`, {
      hint: 'Start Redis or set REDIS_URL to a reachable server.',
      details: { address: where },
    });
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => {
      cleanup();
      reject(unavailable(`no answer within ${timeoutMs} ms`));
    }, timeoutMs);
    const onReady = () => {
      cleanup();
      resolve();
    };
    // Nothing listens or the name does not resolve: no retry will help within the timeout.
    const onError = (error: Error & { code?: string }) => {
      if (!['ECONNREFUSED', 'ENOTFOUND', 'EAI_AGAIN', 'EHOSTUNREACH'].includes(error.code ?? '')) {
        return;
      }
      cleanup();
      reject(unavailable(error.code ?? error.message));
    };
    const cleanup = () => {
      clearTimeout(timer);
      redis.off('ready', onReady);
      redis.off('error', onError);
    };
    redis.on('ready', onReady);
    redis.on('error', onError);
  });
}

/** BullMQ loses jobs when Redis evicts keys: warn unless the policy is `noeviction`. */
export async function checkEvictionPolicy(
  redis: Redis,
  logger: Logger,
): Promise<string | undefined> {
  try {
    const reply = (await redis.config('GET', 'maxmemory-policy')) as string[];
    const policy = reply[1];
    if (policy && policy !== 'noeviction') {
      logger.warn(
        { policy },
        'Redis maxmemory-policy is not noeviction: queued jobs may be evicted and lost. Set `maxmemory-policy noeviction`.',
      );
    }
    return policy;
  } catch {
    // Managed Redis services often forbid CONFIG; nothing to check then.
    return undefined;
  }
}

/** Turns a transport error from ioredis into REDIS_UNAVAILABLE, leaving other errors alone. */
export function asRedisUnavailable(error: unknown): unknown {
  if (error instanceof OrqError) return error;
  const message = error instanceof Error ? error.message : String(error);
  if (
    /Connection is closed|ECONNREFUSED|ETIMEDOUT|enableOfflineQueue|Stream isn't writeable|MaxRetriesPerRequest|ENOTFOUND|EHOSTUNREACH/i.test(
      message,
    )
  ) {
    return new OrqError('REDIS_UNAVAILABLE', `Redis is unreachable (${message})`, {
      hint: 'Start Redis or set REDIS_URL to a reachable server.',
      cause: error,
    });
  }
  return error;
}
