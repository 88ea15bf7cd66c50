import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { startClusterNodes } from './test-redis.js';

const SLOTS = 16_384;

/** The slot Redis Cluster computes for a key (CRC16 of its hash tag), as ioredis does. */
export const slotOf = createRequire(import.meta.url)('cluster-key-slot') as (key: string) => number;

/** Slots per node: startLocalRedisCluster gives node i the i-th run of this many slots. */
const slotsPerNode = (size: number) => Math.ceil(SLOTS / size);

/** The node (index) of a cluster of `size` from startLocalRedisCluster that holds `slot`. */
export const nodeOfSlot = (slot: number, size: number) => Math.floor(slot / slotsPerNode(size));

export interface LocalRedisCluster {
  /** redis:// URL of each node (masters, no replicas). */
  urls: string[];
  /** A plain connection to each node, for checking where keys landed. */
  nodes: Redis[];
  stop(): Promise<void>;
}

/**
 * A real Redis Cluster of `size` nodes on free ports (tests/support/test-redis.ts): the hash slots
 * split evenly, every node met, started only once every node reports cluster_state:ok.
 */
export async function startLocalRedisCluster(size = 3): Promise<LocalRedisCluster> {
  const dir = mkdtempSync(join(tmpdir(), 'orq-test-cluster-'));
  const servers = await startClusterNodes(size, dir).catch((error: unknown) => {
    rmSync(dir, { recursive: true, force: true });
    throw error;
  });
  const urls = servers.ports.map((port) => `redis://127.0.0.1:${port}`);
  const nodes = urls.map((url) => new Redis(url, { maxRetriesPerRequest: null }));
  const stop = async () => {
    for (const node of nodes) node.disconnect();
    await servers.stop();
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    const per = slotsPerNode(size);
    await Promise.all(
      nodes.map((node, i) =>
        node.call('CLUSTER', 'ADDSLOTSRANGE', i * per, Math.min(SLOTS, (i + 1) * per) - 1),
      ),
    );
    for (let i = 1; i < size; i += 1) {
      await nodes[0]!.call('CLUSTER', 'MEET', '127.0.0.1', servers.ports[i]!, servers.busPorts[i]!);
    }
    const deadline = Date.now() + 20_000;
    for (;;) {
      const infos = await Promise.all(nodes.map((n) => n.call('CLUSTER', 'INFO')));
      const ready = infos.every(
        (info) =>
          String(info).includes('cluster_state:ok') &&
          String(info).includes(`cluster_known_nodes:${size}`),
      );
      if (ready) break;
      if (Date.now() > deadline) throw new Error(`the Redis Cluster did not form: ${infos[0]}`);
      await new Promise((r) => setTimeout(r, 100));
    }
  } catch (error) {
    await stop();
    throw error;
  }
  return { urls, nodes, stop };
}
