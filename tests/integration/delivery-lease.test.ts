import { randomUUID } from 'node:crypto';
import { Queue, Worker, type Job } from 'bullmq';
import { Redis } from 'ioredis';
import { afterEach, describe, expect, inject, it } from 'vitest';
import {
  confirmDelivery,
  DeliveryLostError,
  deliveryStarted,
  LOCK_LEASE_SHARE,
} from '../../src/workers/delivery.js';

const LOCK_MS = 4_000;
const PAST_LEASE_MS = LOCK_MS * LOCK_LEASE_SHARE + 100;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const closers: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const close of closers.splice(0).reverse()) await close();
});

/**
 * Runs `body` as the processor of one real BullMQ job with a lock of LOCK_MS and no renewal
 * of BullMQ's own in the meantime; resolves with what it returned or threw.
 */
async function inDelivery<T>(
  body: (job: Job, token: string, lockTtl: () => Promise<number>) => Promise<T>,
): Promise<T> {
  const url = inject('redisUrl');
  const prefix = `lease-${randomUUID()}`;
  const redis = new Redis(url, { maxRetriesPerRequest: null });
  const queue = new Queue('lease', { connection: redis, prefix });
  closers.push(async () => {
    await queue.obliterate({ force: true }).catch(() => undefined);
    await queue.close();
    redis.disconnect();
  });
  let settle: (outcome: { value?: T; error?: unknown }) => void = () => undefined;
  const outcome = new Promise<{ value?: T; error?: unknown }>((resolve) => (settle = resolve));
  const worker = new Worker(
    'lease',
    async (job: Job, token?: string) => {
      const lockTtl = () => redis.pttl(`${queue.toKey(job.id ?? '')}:lock`);
      try {
        settle({ value: await body(job, token ?? '', lockTtl) });
      } catch (error) {
        settle({ error });
      }
    },
    {
      connection: new Redis(url, { maxRetriesPerRequest: null }),
      prefix,
      lockDuration: LOCK_MS,
      lockRenewTime: 60_000,
    },
  );
  closers.push(() => worker.close(true));
  await queue.add('job', {});
  const { value, error } = await outcome;
  if (error !== undefined) throw error;
  return value as T;
}

describe('a delivery confirming it still holds its job', () => {
  it('asks Redis nothing within its lease: the lock is not taken again', async () => {
    const [before, after] = await inDelivery(async (job, token, lockTtl) => {
      deliveryStarted(job);
      await sleep(50);
      const first = await lockTtl();
      await confirmDelivery(job, token, LOCK_MS);
      return [first, await lockTtl()];
    });
    // Not extended: the lock only ran down further.
    expect(after).toBeLessThanOrEqual(before);
    expect(after).toBeLessThan(LOCK_MS - 40);
  });

  it('takes its lock again past its lease', async () => {
    const ttl = await inDelivery(async (job, token, lockTtl) => {
      deliveryStarted(job);
      await sleep(PAST_LEASE_MS);
      await confirmDelivery(job, token, LOCK_MS);
      return lockTtl();
    });
    expect(ttl).toBeGreaterThan(LOCK_MS - 500);
  });

  it('stops past its lease when another delivery holds the job', async () => {
    const lost = inDelivery(async (job, token) => {
      deliveryStarted(job);
      await sleep(PAST_LEASE_MS);
      const queue = job.queueQualifiedName;
      const redis = new Redis(inject('redisUrl'));
      await redis.set(`${queue}:${job.id}:lock`, 'another-delivery', 'PX', LOCK_MS);
      redis.disconnect();
      await confirmDelivery(job, token, LOCK_MS);
    });
    await expect(lost).rejects.toBeInstanceOf(DeliveryLostError);
  });

  it('does not trust a lease for the time between its fetch and its processor', async () => {
    const ttl = await inDelivery(async (job, token, lockTtl) => {
      // As if the process had been paused past the lease right after it took the job.
      job.processedOn = Date.now() - PAST_LEASE_MS;
      deliveryStarted(job);
      await confirmDelivery(job, token, LOCK_MS);
      return lockTtl();
    });
    expect(ttl).toBeGreaterThan(LOCK_MS - 500);
  });
});
