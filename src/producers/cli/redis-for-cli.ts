import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { lock } from 'proper-lockfile';
import { isAbsolute, join, relative, resolve } from 'node:path';
import { z } from 'zod';
import type { OrqConfig } from '../../shared/config/schema.js';
import { OrqError, unreadableReason } from '../../shared/errors.js';
import { configuredConnection, type ConnectionInput } from '../../shared/redis.js';
import { redisAnswers, requireRedisServer, startPrivateRedis } from '../../shared/redis-server.js';

export interface CliRedis {
  url: string;
  /** What to connect to: `url`, or the Redis Cluster it is a node of (redis.cluster). */
  connection: ConnectionInput;
  /**
   * True when no other orq command used the server as this one began (it started it, or took
   * it over): no roles run on it elsewhere.
   */
  owned: boolean;
  /** Taken over: the private server of an earlier orq command that ended without stopping it. */
  adopted?: boolean;
  /** Leaves the server; the last orq command using it stops it. */
  release(): Promise<void>;
}

/** What server.json, beside the private server's data, says about it. */
const ServerMarker = z.object({
  url: z.string(),
  /** The redis-server's pid. */
  pid: z.number().int().optional(),
  /** The orq processes using it; the last one to end stops it. */
  users: z.array(z.number().int()).optional(),
  /** The one user, in markers of orq versions before `users`; read as `users: [ownerPid]`. */
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

/** The private server's data directory: relative when it is under the working directory. */
export function privateRedisDir(): string {
  const dir = join(dataDir(), 'redis');
  const here = relative(process.cwd(), dir);
  return here && !here.startsWith('..') && !isAbsolute(here) ? here : dir;
}

/**
 * No REDIS_URL and no private Redis in the data directory: nothing has run here, so there is no
 * session to find (and no server worth starting to say so).
 */
export function nothingRunHere(config: OrqConfig): boolean {
  return configuredConnection(config) === undefined && !existsSync(join(dataDir(), 'redis'));
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
  if (options.existing && nothingRunHere(config)) {
    throw new OrqError(
      'NOT_FOUND',
      `No orq sessions here: REDIS_URL is not set and ${dir} does not exist (orq run keeps its private Redis there)`,
      {
        hint: 'Set REDIS_URL to the Redis your roles use, or run the command in the directory of your `orq run` (or set ORQ_DATA_DIR).',
      },
    );
  }
  // Nothing to start a server with: say so before leaving an empty data directory behind.
  if (!existsSync(dir)) requireRedisServer();
  try {
    mkdirSync(dir, { recursive: true });
  } catch (error) {
    throw new OrqError(
      'REDIS_START_FAILED',
      `Cannot create ${dir} for orq's private Redis: ${unreadableReason(error)}`,
      {
        hint: 'Run orq in a directory you can write to, set ORQ_DATA_DIR to one, or set REDIS_URL to a running Redis.',
        cause: error,
      },
    );
  }
  // One orq at a time finds, starts, joins or leaves the server here: two starting at once would
  // each start a redis-server on the same append-only file. The lock lapses if its holder dies.
  const locked = async <T>(fn: () => Promise<T>): Promise<T> => {
    const unlock = await lock(dir, {
      lockfilePath: join(dir, 'start.lock'),
      stale: 10_000,
      retries: { retries: 150, minTimeout: 100, maxTimeout: 200 },
      // A lock found stale while held (a very slow start) must not crash the command.
      onCompromised: () => undefined,
    }).catch((error: unknown) => {
      throw new OrqError(
        'REDIS_UNAVAILABLE',
        `Another orq command here holds the lock of its private Redis in ${dir}`,
        { hint: 'Try again in a moment, or set REDIS_URL.', cause: error },
      );
    });
    try {
      return await fn();
    } finally {
      await unlock().catch(() => undefined);
    }
  };
  return locked(() => findOrStart(dir, locked));
}

/** The live users a marker names. */
function liveUsers(marker: ServerMarker): number[] {
  const users = marker.users ?? (marker.ownerPid === undefined ? [] : [marker.ownerPid]);
  return users.filter((pid) => pid !== process.pid && isAlive(pid));
}

/**
 * The private server in `dir`, with this process counted as a user: shared with the orq
 * commands using it, taken over when its users are gone, or started. Holds the lock.
 */
async function findOrStart(dir: string, locked: <T>(fn: () => Promise<T>) => Promise<T>) {
  const marker = join(dir, 'server.json');
  const write = (m: ServerMarker) => writeFileSync(marker, JSON.stringify(m));
  // The last user to leave stops the server, whoever started it.
  const leave = (stop: () => Promise<void>) => () =>
    locked(async () => {
      const now = readMarker(marker);
      const others = now ? liveUsers(now) : [];
      if (now && others.length > 0) {
        write({ url: now.url, ...(now.pid ? { pid: now.pid } : {}), users: others });
        return;
      }
      await stop();
      rmSync(marker, { force: true });
    });

  const found = existsSync(marker) ? readMarker(marker) : undefined;
  // Not answering: a stale marker from a run killed with its server; a new one starts below.
  if (found && (await redisAnswers(found.url))) {
    const { url, pid } = found;
    // A server orq did not record the pid of cannot be stopped by it: use it as it is.
    if (pid === undefined) {
      return { url, connection: url, owned: false, release: async () => undefined };
    }
    const users = liveUsers(found);
    write({ url, pid, users: [...users, process.pid] });
    // No one else uses it (its orq was killed, or its terminal closed): this command takes it
    // over, so no redis-server is left running on the data after the last orq.
    const adopted = users.length === 0;
    return {
      url,
      connection: url,
      owned: adopted,
      ...(adopted ? { adopted } : {}),
      release: leave(() => stopByPid(pid)),
    };
  }
  const server = await startPrivateRedis({ dir, appendonly: true, detached: true });
  const pid = server.process.pid;
  write({ url: server.url, ...(pid ? { pid } : {}), users: [process.pid] });
  return {
    url: server.url,
    connection: server.url,
    owned: true,
    release: leave(() => server.stop()),
  };
}
