import { existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { Redis } from 'ioredis';
import type { OrqConfig } from '../../shared/config/schema.js';
import { OrqError } from '../../shared/errors.js';
import { configuredConnection, type ConnectionInput } from '../../shared/redis.js';
import { startPrivateRedis } from '../../shared/redis-server.js';

export interface CliRedis {
  url: string;
  /** What to connect to: `url`, or the Redis Cluster it is a node of (redis.cluster). */
  connection: ConnectionInput;
  /** True when this command started the server and must stop it. */
  owned: boolean;
  release(): Promise<void>;
}

/** Where `orq` keeps its private Redis (AOF files) when no REDIS_URL is given. */
export function dataDir(): string {
  return resolve(process.env.ORQ_DATA_DIR ?? '.orq');
}

async function answers(url: string): Promise<boolean> {
  const probe = new Redis(url, {
    lazyConnect: true,
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
  });
  probe.on('error', () => undefined);
  try {
    await probe.connect();
    await probe.ping();
    return true;
  } catch {
    return false;
  } finally {
    probe.disconnect();
  }
}

export interface RedisForCliOptions {
  /**
   * The command only reads sessions: without REDIS_URL and without a private Redis here it
   * fails, instead of starting an empty server (and leaving an empty .orq/ behind).
   */
  existing?: boolean;
}

/**
 * The Redis a CLI command talks to: REDIS_URL / config when given; otherwise the private,
 * persistent server under .orq/redis, reused when another orq command already runs it, so a
 * finished session can still be inspected with `orq status` or `orq history`.
 */
export async function redisForCli(
  config: OrqConfig,
  options: RedisForCliOptions = {},
): Promise<CliRedis> {
  const configured = configuredConnection(config);
  if (config.redis.url && configured) {
    return {
      url: config.redis.url,
      connection: configured,
      owned: false,
      release: async () => undefined,
    };
  }
  const dir = join(dataDir(), 'redis');
  if (options.existing && !existsSync(dir)) {
    throw new OrqError(
      'NOT_FOUND',
      `No orq sessions here: REDIS_URL is not set and ${dir} does not exist (orq run keeps its private Redis there)`,
      {
        hint: 'Set REDIS_URL to the Redis your roles use, or run the command in the directory of your `orq run` (or set ORQ_DATA_DIR).',
      },
    );
  }
  const marker = join(dir, 'server.json');
  if (existsSync(marker)) {
    try {
      const { url } = JSON.parse(readFileSync(marker, 'utf8')) as { url: string };
      if (await answers(url))
        return { url, connection: url, owned: false, release: async () => undefined };
    } catch {
      // A stale marker from a killed run: start a new server below.
    }
  }
  const server = await startPrivateRedis({ dir, appendonly: true });
  writeFileSync(marker, JSON.stringify({ url: server.url, pid: server.process.pid }));
  return {
    url: server.url,
    connection: server.url,
    owned: true,
    async release() {
      await server.stop();
      rmSync(marker, { force: true });
    },
  };
}
