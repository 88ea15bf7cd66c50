import { createRequire } from 'node:module';
import { Cluster } from 'ioredis';
import { describe, expect, it } from 'vitest';
import { ALL_QUEUES, bullPrefix } from '../../src/shared/queues.js';
import { configuredConnection, createConnection } from '../../src/shared/redis.js';
import { sessionKeyList, sessionKeys } from '../../src/shared/store/keys.js';

const require = createRequire(import.meta.url);
/** The slot Redis Cluster computes for a key (CRC16 of its hash tag), as ioredis does. */
const slotOf = require('cluster-key-slot') as (key: string) => number;

describe('keys on Redis Cluster', () => {
  it('puts every key one atomic session transition touches in a single slot', () => {
    for (const sessionId of ['3a5d5fe5-ab9c-4b54-bb93-a32f119ad312', 'x', 'crashed-producer']) {
      const keys = sessionKeys('orq', sessionId);
      const all = [...sessionKeyList(keys), ...Object.values(keys)];
      expect(new Set(all.map(slotOf)).size, sessionId).toBe(1);
    }
  });

  it('spreads different sessions over different slots', () => {
    const slots = new Set(
      Array.from({ length: 50 }, (_, i) => slotOf(sessionKeys('orq', `s${i}`).meta)),
    );
    expect(slots.size).toBeGreaterThan(40);
  });

  it('keeps all of BullMQ keys of every orq queue in the slot of the {prefix} tag', () => {
    const prefix = bullPrefix('orq');
    const slots = ALL_QUEUES.flatMap((q) =>
      ['wait', 'active', 'events', 'meta', 'id', '123'].map((suffix) =>
        slotOf(`${prefix}:${q}:${suffix}`),
      ),
    );
    expect(new Set(slots).size).toBe(1);
  });
});

describe('connecting to a Redis Cluster', () => {
  const config = (redis: { url?: string; cluster: boolean }) => ({ redis });

  it('takes redis.url as a seed node when redis.cluster is set, and as a server otherwise', () => {
    expect(configuredConnection(config({ url: 'redis://h:7000', cluster: true }))).toEqual({
      cluster: ['redis://h:7000'],
    });
    expect(configuredConnection(config({ url: 'redis://h:6379', cluster: false }))).toBe(
      'redis://h:6379',
    );
    expect(configuredConnection(config({ cluster: false }))).toBeUndefined();
  });

  it('refuses redis.cluster without redis.url, naming the setting', () => {
    expect(() => configuredConnection(config({ cluster: true }))).toThrow(
      expect.objectContaining({
        code: 'CONFIG_INVALID',
        message: expect.stringContaining('redis.cluster is set, but redis.url is not') as unknown,
        hint: expect.stringContaining('REDIS_URL') as unknown,
      }),
    );
  });

  it("gives every node the seed's credentials and TLS, and the Cluster the retry policy", () => {
    const cluster = createConnection(
      { cluster: ['rediss://user:p%40ss@127.0.0.1:1'], options: { lazyConnect: true } },
      'consumer',
    ) as Cluster;
    const producer = createConnection(
      { cluster: ['redis://127.0.0.1:1'], options: { lazyConnect: true } },
      'producer',
    ) as Cluster;
    try {
      expect(cluster).toBeInstanceOf(Cluster);
      expect(cluster.options.redisOptions).toMatchObject({
        username: 'user',
        password: 'p@ss',
        tls: {},
        // BullMQ's workers need it null on each node (they read it there).
        maxRetriesPerRequest: null,
      });
      expect(producer.options.enableOfflineQueue).toBe(false);
      expect(producer.options.clusterRetryStrategy).toBeTypeOf('function');
      expect(producer.options.redisOptions).not.toHaveProperty('password');
    } finally {
      cluster.disconnect();
      producer.disconnect();
    }
  });

  it('refuses a Cluster with no node', () => {
    expect(() => createConnection({ cluster: [] }, 'consumer')).toThrow(/names no node/);
  });
});
