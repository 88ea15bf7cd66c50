import { Queue, type JobsOptions } from 'bullmq';
import type { Redis } from 'ioredis';
import { ALL_QUEUES, bullPrefix, type OutboxJob, type QueueName } from './queues.js';
import type { SessionStore } from './store/session-store.js';

const COORDINATOR_MIN_ATTEMPTS = 10;

/** One BullMQ Queue per orq queue, sharing a connection, with orq's default job options. */
export class QueueSet {
  private readonly queues = new Map<QueueName, Queue>();

  constructor(
    connection: Redis,
    readonly prefix: string,
    private readonly jobOptions: JobsOptions,
  ) {
    for (const name of ALL_QUEUES) {
      this.queues.set(
        name,
        new Queue(name, { connection, prefix: bullPrefix(prefix), defaultJobOptions: jobOptions }),
      );
    }
  }

  get(name: QueueName): Queue {
    const queue = this.queues.get(name);
    if (!queue) throw new Error(`unknown queue ${name}`);
    return queue;
  }

  all(): Queue[] {
    return [...this.queues.values()];
  }

  /** Adds a job under its deterministic id: adding the same id again is a no-op in BullMQ. */
  async add(job: OutboxJob): Promise<void> {
    await this.get(job.queue).add(job.name, job.data, {
      jobId: job.jobId,
      // A dropped coordinator event would stall its session: give events more tries than role jobs.
      ...(job.queue === 'coordinator'
        ? { attempts: Math.max(this.jobOptions.attempts ?? 1, COORDINATOR_MIN_ATTEMPTS) }
        : {}),
    });
  }

  async close(): Promise<void> {
    await Promise.all(this.all().map((q) => q.close()));
  }
}

/**
 * Moves a session's outbox into the queues. Called after every applied transition and again
 * when an event is redelivered, so a crash between the state write and the enqueue loses nothing.
 */
export async function flushOutbox(
  store: SessionStore,
  queues: QueueSet,
  sessionId: string,
): Promise<number> {
  const jobs = await store.readOutbox(sessionId);
  for (const job of jobs) await queues.add(job);
  await store.removeFromOutbox(
    sessionId,
    jobs.map((j) => j.jobId),
  );
  return jobs.length;
}
