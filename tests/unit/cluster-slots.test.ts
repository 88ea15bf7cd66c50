import { Cluster, Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import { ALL_QUEUES, bullPrefix, queuePrefix, type QueueName } from '../../src/shared/queues.js';
import { configuredConnection, createConnection } from '../../src/shared/redis.js';
import { sessionKeyList, sessionKeys } from '../../src/shared/store/keys.js';
import { slotOf } from '../support/redis-cluster.js';

/** Key suffixes BullMQ uses within a queue (lists, streams, hashes, a job). */
const BULL_SUFFIXES = ['wait', 'active', 'events', 'meta', 'id', 'completed', '123'];

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

  it("keeps each queue's BullMQ keys in one slot, a slot per queue on a Cluster", () => {
    const cluster = new Cluster([{ host: '127.0.0.1', port: 1 }], { lazyConnect: true });
    try {
      const slotsOf = (queue: QueueName) =>
        new Set(
          BULL_SUFFIXES.map((suffix) =>
            slotOf(`${queuePrefix('orq', queue, cluster)}:${queue}:${suffix}`),
          ),
        );
      for (const queue of ALL_QUEUES) expect(slotsOf(queue).size, queue).toBe(1);
      const perQueue = ALL_QUEUES.map((queue) => [...slotsOf(queue)][0]);
      expect(new Set(perQueue).size).toBe(ALL_QUEUES.length);
      expect(queuePrefix('orq', 'work', cluster)).toBe('{orq:work}');
    } finally {
      cluster.disconnect();
    }
  });

  it('keeps the one {prefix} tag for every queue on a single server (the layout before)', () => {
    const server = new Redis({ lazyConnect: true });
    try {
      for (const queue of ALL_QUEUES) {
        expect(queuePrefix('orq', queue, server)).toBe('{orq}');
        expect(queuePrefix('orq', queue, server)).toBe(bullPrefix('orq'));
      }
    } finally {
      server.disconnect();
    }
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
