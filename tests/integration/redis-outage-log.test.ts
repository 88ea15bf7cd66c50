import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { createClient } from '../../src/producers/client.js';
import { parseConfig } from '../../src/shared/config/load.js';
import { createLogger } from '../../src/shared/logger.js';
import { startTestRedis, type TestRedis } from '../support/test-redis.js';
import { startRoles } from '../../src/workers/registry.js';
import { eventually } from '../support/scenarios.js';

interface Line {
  level: number;
  msg: string;
  role?: string;
  kind?: string;
  errors?: number;
}

/** A logger whose lines are kept, parsed, in `lines`. */
function keptLogger() {
  const lines: Line[] = [];
  const logger = createLogger({
    level: 'info',
    destination: { write: (line: string) => void lines.push(JSON.parse(line) as Line) },
  });
  return { lines, logger };
}

/**
 * Stops `redis` for 3 s, long enough for many failed reconnects, and starts it again on its
 * port: the server the connections find when they get through.
 */
async function outage(redis: TestRedis): Promise<void> {
  await redis.stop();
  await new Promise((r) => setTimeout(r, 3_000));
  await redis.start();
}

describe('a pod through a Redis outage', () => {
  it('logs the outage once per connection, not once per failed reconnect, and its end', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'orq-outage-log-'));
    const redis = await startTestRedis({ dir, appendonly: false });
    const { lines, logger } = keptLogger();
    const pod = await startRoles({
      roles: ['worker', 'judge'],
      connection: redis.url,
      config: parseConfig({ redis: { prefix: `o${randomUUID().slice(0, 8)}` } }),
      logger,
    });
    try {
      // ioredis retries after 50, 100, 150 ... ms: a few seconds are many failed reconnects.
      await outage(redis);
      // One log per connection: the pod's shared one and each role's (with BullMQ's own).
      const restored = await eventually(
        () => {
          const done = lines.filter((l) => l.msg === 'redis connection restored');
          return done.length === 3 ? done : undefined;
        },
        'each connection to log its restore',
        20_000,
      );
      const lost = lines.filter((l) => l.msg === 'redis unreachable; reconnecting');
      expect(lost.map((l) => l.role ?? 'shared').sort()).toEqual(['judge', 'shared', 'worker']);
      expect(restored.map((l) => l.role ?? 'shared').sort()).toEqual(['judge', 'shared', 'worker']);
      // Each restore counts the failed reconnects it did not log one by one.
      for (const line of restored) expect(line.errors).toBeGreaterThan(3);
      // Nothing else at warn or above: no line per failed reconnect, no "worker error".
      const loud = lines.filter(
        (l) => l.level >= 40 && l.msg !== 'redis unreachable; reconnecting',
      );
      expect(loud).toEqual([]);
    } finally {
      await pod.close(5_000);
      await redis.stop();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('a client through a Redis outage', () => {
  it('logs the outage once through the logger it was given, not once per failed reconnect, and its end', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'orq-client-outage-'));
    const redis = await startTestRedis({ dir, appendonly: false });
    const { lines, logger } = keptLogger();
    const client = await createClient({ connection: redis.url, logger });
    try {
      // The producer connection retries every 200, 400 ... 2000 ms: a few failed reconnects.
      await outage(redis);
      const restored = await eventually(
        () => {
          const done = lines.filter((l) => l.msg === 'redis connection restored');
          return done.length > 0 ? done : undefined;
        },
        'the client to log its restore',
        20_000,
      );
      // Its requests go through again, and nothing more is logged of the outage.
      await client.list();
      const lost = lines.filter((l) => l.msg === 'redis unreachable; reconnecting');
      expect(lost).toHaveLength(1);
      expect(restored).toHaveLength(1);
      expect(lost[0]?.kind).toBe('producer');
      expect(restored[0]?.errors).toBeGreaterThan(1);
      expect(lines.filter((l) => l.level >= 40 && l !== lost[0])).toEqual([]);
    } finally {
      await client.close();
      await redis.stop();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
