import { existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { z } from 'zod';
import type { OrqConfig } from '../../shared/config/schema.js';
import { OrqError } from '../../shared/errors.js';
import { configuredConnection, type ConnectionInput } from '../../shared/redis.js';
import { redisAnswers, startPrivateRedis } from '../../shared/redis-server.js';

export interface CliRedis {
  url: string;
  /** What to connect to: `url`, or the Redis Cluster it is a node of (redis.cluster). */
  connection: ConnectionInput;
  /** True when this command must stop the server: it started it, or took it over. */
  owned: boolean;
  /** Taken over: the private server of an earlier orq command that ended without stopping it. */
  adopted?: boolean;
  release(): Promise<void>;
}

/** What server.json, beside the private server's data, says about it. */
const ServerMarker = z.object({
  url: z.string(),
  /** The redis-server's pid. */
  pid: z.number().int().optional(),
  /** The orq process that stops it; a marker without one predates ownership. */
  ownerPid: z.number().int().optional(),
});
type ServerMarker = z.infer<typeof ServerMarker>;

function isAlive(pid: number | undefined): boolean {
  if (pid === undefined) return false;
  try {
    process.kill(pid, 0);
  } catch (error) {
    // EPERM: it exists, under another user.
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
  // A killed process its parent has not reaped yet still takes signals (Linux says Z).
  try {
    return !/^\d+ \(.*\) Z/.test(readFileSync(`/proc/${pid}/stat`, 'utf8'));
  } catch {
    return true;
  }
}

/** Sends `signal`; false when the process is gone already. */
function signal(pid: number, name: NodeJS.Signals): boolean {
  try {
    process.kill(pid, name);
    return true;
  } catch {
    return false;
  }
}

/** Stops a server this process did not spawn: SIGTERM (AOF is flushed), SIGKILL after 5 s. */
async function stopByPid(pid: number): Promise<void> {
  if (!signal(pid, 'SIGTERM')) return;
  const deadline = Date.now() + 5_000;
  while (isAlive(pid)) {
    if (Date.now() > deadline) {
      signal(pid, 'SIGKILL');
      return;
    }
    await new Promise((r) => setTimeout(r, 50));
  }
}

function readMarker(path: string): ServerMarker | undefined {
  try {
    return ServerMarker.parse(JSON.parse(readFileSync(path, 'utf8')));
  } catch {
    return undefined;
  }
}

/** Where `orq` keeps its private Redis (AOF files) when no REDIS_URL is given. */
export function dataDir(): string {
  return resolve(process.env.ORQ_DATA_DIR ?? '.orq');
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
  const found = existsSync(marker) ? readMarker(marker) : undefined;
  // Not answering: a stale marker from a run killed with its server; a new one starts below.
  if (found && (await redisAnswers(found.url))) {
    const { url, pid } = found;
    // Its owner still runs (another orq command here): share the server, the owner stops it.
    if (isAlive(found.ownerPid) || pid === undefined) {
      return { url, connection: url, owned: false, release: async () => undefined };
    }
    // Its owner ended without stopping it (killed, or its terminal closed): this command
    // takes it over, so no redis-server is left running on the data after the last orq.
    writeFileSync(marker, JSON.stringify({ ...found, ownerPid: process.pid }));
    return {
      url,
      connection: url,
      owned: true,
      adopted: true,
      async release() {
        await stopByPid(pid);
        rmSync(marker, { force: true });
      },
    };
  }
  const server = await startPrivateRedis({ dir, appendonly: true, detached: true });
  writeFileSync(
    marker,
    JSON.stringify({ url: server.url, pid: server.process.pid, ownerPid: process.pid }),
  );
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
