import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { createServer } from 'node:net';
import { Redis } from 'ioredis';
import { OrqError } from './errors.js';

/** A redis-server child process owned by this process (tests, `orq run` without REDIS_URL). */
export interface PrivateRedis {
  url: string;
  port: number;
  process: ChildProcess;
  stop(): Promise<void>;
}

export interface PrivateRedisOptions {
  /** Working directory for AOF/RDB files; created when missing. */
  dir: string;
  /** AOF persistence: on for `orq run` so a crash loses nothing acknowledged. */
  appendonly?: boolean;
  port?: number;
  binary?: string;
  /** More redis-server options, as command-line arguments (tests: cluster mode). */
  args?: readonly string[];
  /**
   * In a process group of its own, so a Ctrl-C in the terminal reaches only its owner, which
   * stops it once its own shutdown no longer needs it (`orq run`).
   */
  detached?: boolean;
}

export function findRedisServer(binary = 'redis-server'): string | undefined {
  const probe = spawnSync(binary, ['--version'], { encoding: 'utf8' });
  return probe.status === 0 ? binary : undefined;
}

/** The redis-server binary to run, or REDIS_NOT_INSTALLED saying how to get one. */
export function requireRedisServer(binary = 'redis-server'): string {
  if (findRedisServer(binary)) return binary;
  throw new OrqError('REDIS_NOT_INSTALLED', 'redis-server is not installed', {
    hint: 'Install it (Debian/Ubuntu: `apt-get install redis-server`, macOS: `brew install redis`) or set REDIS_URL to a running Redis.',
  });
}

export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.unref();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const addr = srv.address();
      const port = typeof addr === 'object' && addr ? addr.port : 0;
      srv.close(() => resolve(port));
    });
  });
}

/** Whether a Redis answers PING at `url` now (one try, no retries). */
export async function redisAnswers(url: string): Promise<boolean> {
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
    // A refused probe has ended already: ioredis's disconnect would then wait 2 s for a close
    // its socket emitted before, holding the process (every `orq` starting a private Redis).
    if (probe.status !== 'end') probe.disconnect();
  }
}

async function waitForPing(url: string, child: ChildProcess, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (child.exitCode !== null) {
      throw new OrqError('REDIS_START_FAILED', `redis-server exited with code ${child.exitCode}`, {
        hint: 'Run redis-server by hand to see why it fails, or set REDIS_URL to a running server.',
      });
    }
    if (await redisAnswers(url)) return;
    if (Date.now() > deadline) {
      throw new OrqError('REDIS_START_FAILED', `redis-server did not answer on ${url}`, {
        hint: 'Check that the port is free and redis-server can write its directory.',
      });
    }
    await new Promise((r) => setTimeout(r, 50));
  }
}

/**
 * Starts a private redis-server on a free loopback port, configured the way BullMQ wants
 * (`noeviction`), with AOF when asked for.
 */
export async function startPrivateRedis(options: PrivateRedisOptions): Promise<PrivateRedis> {
  const binary = requireRedisServer(options.binary);
  mkdirSync(options.dir, { recursive: true });
  const port = options.port ?? (await freePort());
  const args = [
    '--port',
    String(port),
    '--bind',
    '127.0.0.1',
    '--dir',
    options.dir,
    '--maxmemory-policy',
    'noeviction',
    '--save',
    '',
    '--appendonly',
    options.appendonly ? 'yes' : 'no',
    '--appendfsync',
    'everysec',
    '--daemonize',
    'no',
    '--logfile',
    '',
    ...(options.args ?? []),
  ];
  const child = spawn(binary, args, {
    stdio: ['ignore', 'ignore', 'pipe'],
    detached: options.detached ?? false,
  });
  const url = `redis://127.0.0.1:${port}`;
  await waitForPing(url, child, 10_000);
  return {
    url,
    port,
    process: child,
    async stop() {
      if (child.exitCode !== null) return;
      await new Promise<void>((resolve) => {
        child.once('exit', () => resolve());
        child.kill('SIGTERM');
        setTimeout(() => child.kill('SIGKILL'), 5_000).unref();
      });
    },
  };
}
