import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { startPrivateRedis } from '../../src/shared/redis-server.js';

/**
 * The benchmark's own redis-server: a free loopback port, no AOF, no snapshots, never the
 * machine's 6379 (REDIS_URL is ignored on purpose: FLUSHALL between runs must be harmless).
 */
export interface BenchRedis {
  url: string;
  /** A plain connection for the bench's own reads (state polling, INFO, FLUSHALL). */
  admin: Redis;
  version: string;
  stop(): Promise<void>;
}

export async function startBenchRedis(): Promise<BenchRedis> {
  const dir = mkdtempSync(join(tmpdir(), 'orq-bench-redis-'));
  const server = await startPrivateRedis({ dir, appendonly: false });
  const admin = new Redis(server.url, { maxRetriesPerRequest: null });
  const info = await admin.info('server');
  const version = /redis_version:(\S+)/.exec(info)?.[1] ?? 'unknown';
  return {
    url: server.url,
    admin,
    version,
    async stop() {
      admin.disconnect();
      await server.stop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

export interface RedisUsage {
  /** CPU seconds of redis-server (user + system), cumulative. */
  cpuS: number;
  /** Calls per command (INFO commandstats), cumulative; commands run by Lua scripts included. */
  calls: Record<string, number>;
}

export async function redisUsage(admin: Redis): Promise<RedisUsage> {
  const [cpu, stats] = await Promise.all([admin.info('cpu'), admin.info('commandstats')]);
  const num = (name: string) => Number(new RegExp(`${name}:([\\d.]+)`).exec(cpu)?.[1] ?? 0);
  const calls: Record<string, number> = {};
  for (const match of stats.matchAll(/cmdstat_([^:]+):calls=(\d+)/g)) {
    calls[match[1] as string] = Number(match[2]);
  }
  return { cpuS: num('used_cpu_user') + num('used_cpu_sys'), calls };
}

/** What redis-server did between two readings: CPU ms and calls per command. */
export function usageDelta(
  before: RedisUsage,
  after: RedisUsage,
): { cpuMs: number; calls: Record<string, number>; totalCalls: number } {
  const calls: Record<string, number> = {};
  let totalCalls = 0;
  for (const [name, n] of Object.entries(after.calls)) {
    const d = n - (before.calls[name] ?? 0);
    if (d > 0) {
      calls[name] = d;
      totalCalls += d;
    }
  }
  return { cpuMs: (after.cpuS - before.cpuS) * 1000, calls, totalCalls };
}

/** The `n` most called commands, each divided by `per` (e.g. calls per task). */
export function topCalls(
  calls: Record<string, number>,
  per: number,
  n = 8,
): Record<string, number> {
  return Object.fromEntries(
    Object.entries(calls)
      .sort((a, b) => b[1] - a[1])
      .slice(0, n)
      .map(([name, count]) => [name, count / per]),
  );
}

/** Bytes Redis holds under one orq prefix: BullMQ's keys (`{prefix}:…`) and the session state's. */
export interface PrefixBytes {
  jobs: number;
  state: number;
  keys: number;
}

/**
 * What one prefix costs in Redis (MEMORY USAGE of each key, exact: SAMPLES 0), read with SCAN:
 * for a bench's own Redis between measured runs, not for a busy server.
 */
export async function prefixBytes(admin: Redis, prefix: string): Promise<PrefixBytes> {
  const sum = async (match: string) => {
    let bytes = 0;
    let keys = 0;
    let cursor = '0';
    do {
      const [next, batch] = await admin.scan(cursor, 'MATCH', match, 'COUNT', 1000);
      cursor = next;
      if (batch.length === 0) continue;
      const pipeline = admin.pipeline();
      for (const key of batch) pipeline.memory('USAGE', key, 'SAMPLES', 0);
      for (const [, value] of (await pipeline.exec()) ?? []) bytes += Number(value ?? 0);
      keys += batch.length;
    } while (cursor !== '0');
    return { bytes, keys };
  };
  const [jobs, state] = await Promise.all([sum(`{${prefix}}:*`), sum(`${prefix}:*`)]);
  return { jobs: jobs.bytes, state: state.bytes, keys: jobs.keys + state.keys };
}
