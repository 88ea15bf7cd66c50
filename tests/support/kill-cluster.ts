import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomUUID } from 'node:crypto';
import { expect } from 'vitest';
import { createClient, type OrqClient } from '../../src/producers/client.js';
import { freePort, startPrivateRedis, type PrivateRedis } from '../../src/shared/redis-server.js';
import { bullQueue, Pods } from './pods.js';
import { eventually } from './scenarios.js';

/**
 * A cluster to kill for the tests of waits for a person (issue 48): a private Redis with AOF on
 * a port of its own (so it can be restarted in place), `orq start` pods as processes (a
 * coordinator, and one pod of the other roles), and a client. `close` stops all of it.
 */
export interface KillCluster {
  client: OrqClient;
  pods: Pods;
  prefix: string;
  /** Starts the pods `start` started, after `pods.stopAll`: the coordinator first. */
  startPods(): Promise<void>;
  /** Stops Redis and starts it again on the same AOF and port. */
  restartRedis(): Promise<void>;
  close(): Promise<void>;
}

export async function startKillCluster(name: string): Promise<KillCluster> {
  const dir = mkdtempSync(join(tmpdir(), `orq-${name}-`));
  const port = await freePort();
  let redis: PrivateRedis = await startPrivateRedis({ dir, port, appendonly: true });
  const prefix = `k${randomUUID().slice(0, 8)}`;
  const pods = new Pods({ REDIS_URL: redis.url, ORQ_PREFIX: prefix });
  let client: OrqClient | undefined;
  const close = async () => {
    await client?.close();
    await pods.stopAll();
    await redis.stop();
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    const startPods = async () => {
      await pods.start('coordinator');
      await pods.start('planner,judge,worker,replanner');
    };
    await startPods();
    client = await createClient({ connection: redis.url, prefix });
    return {
      client,
      pods,
      prefix,
      startPods,
      restartRedis: async () => {
        await redis.stop();
        redis = await startPrivateRedis({ dir, port, appendonly: true });
      },
      close,
    };
  } catch (error) {
    await close();
    throw error;
  }
}

/** The session as the client reads it once Redis is back (it reconnects on its own schedule). */
export const readWhenBack = (client: OrqClient, id: string) =>
  eventually(() => client.get(id).catch(() => undefined), 'Redis back', 20_000);

/** A wait holds nothing: no job is active or queued in any role's queue. */
export async function expectNoRoleJobs(cluster: KillCluster): Promise<void> {
  for (const name of ['plan', 'judge', 'work', 'replan'] as const) {
    const queue = bullQueue(cluster.client.store.redis, cluster.prefix, name);
    try {
      expect(await queue.getJobCounts('active', 'waiting', 'delayed', 'prioritized')).toEqual({
        active: 0,
        waiting: 0,
        delayed: 0,
        prioritized: 0,
      });
    } finally {
      await queue.close();
    }
  }
}
