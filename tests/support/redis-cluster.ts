import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { freePort, startPrivateRedis, type PrivateRedis } from '../../src/shared/redis-server.js';

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
 * A real Redis Cluster of `size` private redis-servers on free loopback ports: the hash slots
 * split evenly, every node met, started only once every node reports cluster_state:ok.
 */
export async function startLocalRedisCluster(size = 3): Promise<LocalRedisCluster> {
  const dir = mkdtempSync(join(tmpdir(), 'orq-test-cluster-'));
  const servers: PrivateRedis[] = [];
  const busPorts: number[] = [];
  for (let i = 0; i < size; i += 1) {
    const busPort = await freePort();
    busPorts.push(busPort);
    servers.push(
      await startPrivateRedis({
        dir: join(dir, `node${i}`),
        appendonly: false,
        // The bus port is chosen too: the default (port + 10000) may be taken or out of range.
        args: [
          '--cluster-enabled',
          'yes',
          '--cluster-config-file',
          'nodes.conf',
          '--cluster-port',
          String(busPort),
          '--cluster-node-timeout',
          '5000',
        ],
      }),
    );
  }
  const nodes = servers.map((s) => new Redis(s.url, { maxRetriesPerRequest: null }));
  const stop = async () => {
    for (const node of nodes) node.disconnect();
    await Promise.all(servers.map((s) => s.stop()));
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
      await nodes[0]!.call('CLUSTER', 'MEET', '127.0.0.1', servers[i]!.port, busPorts[i]!);
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
  return { urls: servers.map((s) => s.url), nodes, stop };
}
