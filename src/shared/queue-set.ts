import { Queue, type JobsOptions } from 'bullmq';
import { ALL_QUEUES, jobKind, queuePrefix, type OutboxJob, type QueueName } from './queues.js';
import type { SessionStore } from './store/session-store.js';
import { chunked } from './chunked.js';
import { settlesWithin } from './settles-within.js';
import type { RedisConnection } from './redis.js';
import { FairRelease, fairPriority, type ReleasedJob } from './fair-release.js';

const COORDINATOR_MIN_ATTEMPTS = 10;

/**
 * Jobs per addBulk call. One pipeline of thousands of jobs is a write of megabytes: it fills
 * Redis's receive window, and Linux then waits for a window probe (200 ms or more) before it
 * sends on. Chunks sent one after another keep every write small.
 */
export const ADD_BULK_CHUNK = 100;

/** How long close() waits for queues still checking the server. */
const READY_WAIT_MS = 1_000;

/** One BullMQ Queue per orq queue, sharing a connection, with orq's default job options. */
export class QueueSet {
  private readonly queues = new Map<QueueName, Queue>();
  /** The fair-release tags every pod shares (fair-release.ts). */
  readonly fair: FairRelease;

  constructor(
    private readonly connection: RedisConnection,
    readonly prefix: string,
    private readonly jobOptions: JobsOptions,
    /** queues.taskJobNames: 'plain' adds task jobs under their bare kind, as older pods expect. */
    private readonly taskJobNames: 'descriptive' | 'plain' = 'descriptive',
    /** tenants.weights, for fair release. */
    weights: Readonly<Record<string, number>> = {},
  ) {
    this.fair = new FairRelease(connection, prefix, Date.now, weights);
    for (const name of ALL_QUEUES) {
      const queue = new Queue(name, {
        connection,
        prefix: queuePrefix(prefix, name, connection),
        defaultJobOptions: jobOptions,
      });
      // A Queue re-emits its connection's errors, and an 'error' nobody listens to kills the
      // process: one closed while the Queue still checks the server (a short `orq status` on a
      // Cluster) did. The connection's own listener logs them already; calls still reject.
      queue.on('error', () => undefined);
      this.queues.set(name, queue);
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
    const [released] = (await this.releaseFairly([job])) as [OutboxJob];
    await this.get(released.queue).add(
      this.nameOf(released),
      released.data,
      this.optionsFor(released),
    );
  }

  /**
   * Whether a job with this id is in the queue, in any state: exactly when `add` of that id
   * would be a no-op (BullMQ dedups on the job's key).
   */
  async has(name: QueueName, jobId: string): Promise<boolean> {
    return (await this.connection.exists(this.get(name).toKey(jobId))) === 1;
  }

  /** Adds many jobs with one addBulk per queue and ADD_BULK_CHUNK jobs (same dedup by id as `add`). */
  async addAll(jobs: readonly OutboxJob[]): Promise<void> {
    const byQueue = new Map<QueueName, OutboxJob[]>();
    for (const job of await this.releaseFairly(jobs)) {
      const group = byQueue.get(job.queue);
      if (group) group.push(job);
      else byQueue.set(job.queue, [job]);
    }
    await Promise.all(
      [...byQueue].map(async ([name, group]) => {
        for (const slice of chunked(group, ADD_BULK_CHUNK)) {
          await this.get(name).addBulk(
            slice.map((job) => ({
              name: this.nameOf(job),
              data: job.data,
              opts: this.optionsFor(job),
            })),
          );
        }
      }),
    );
  }

  /**
   * Work jobs with a fair share get their BullMQ priority from their session's SFQ tags, one
   * Redis call per session and flush (fair-release.ts); other jobs go as they are.
   */
  private async releaseFairly(jobs: readonly OutboxJob[]): Promise<readonly OutboxJob[]> {
    const bySession = new Map<string, number[]>();
    jobs.forEach((job, i) => {
      const sessionId = (job.data as { sessionId?: unknown } | null)?.sessionId;
      if (!job.fairShare || typeof sessionId !== 'string') return;
      const group = bySession.get(sessionId);
      if (group) group.push(i);
      else bySession.set(sessionId, [i]);
    });
    if (bySession.size === 0) return jobs;
    const released = [...jobs];
    await Promise.all(
      [...bySession].map(async ([sessionId, indexes]) => {
        const share = jobs[indexes[0] as number]?.fairShare as NonNullable<OutboxJob['fairShare']>;
        const tags = await this.fair.release(sessionId, share.tenant, indexes.length);
        indexes.forEach((index, k) => {
          const job = jobs[index] as OutboxJob;
          const { tag, lead } = tags[k] as ReleasedJob;
          released[index] = {
            ...job,
            // Its critical path ranks its model calls at a quota's line too (quota-line.ts).
            data: {
              ...(job.data as object),
              fairTag: tag,
              ...(job.fairShare?.criticalPath !== undefined
                ? { criticalPath: job.fairShare.criticalPath }
                : {}),
            },
            priority: fairPriority(share.priority, lead, job.fairShare?.criticalPath),
          };
        });
      }),
    );
    return released;
  }

  private nameOf(job: OutboxJob): string {
    return this.taskJobNames === 'plain' ? jobKind(job.name) : job.name;
  }

  private optionsFor(job: OutboxJob): JobsOptions {
    return {
      jobId: job.jobId,
      ...(job.priority ? { priority: job.priority } : {}),
      ...(job.notBefore !== undefined ? { delay: Math.max(0, job.notBefore - Date.now()) } : {}),
      ...(job.retry
        ? {
            attempts: job.retry.attempts,
            backoff: { type: 'exponential', delay: job.retry.backoffMs },
          }
        : // A dropped coordinator event would stall its session: give events more tries than role jobs.
          job.queue === 'coordinator'
          ? { attempts: Math.max(this.jobOptions.attempts ?? 1, COORDINATOR_MIN_ATTEMPTS) }
          : {}),
    };
  }

  async close(): Promise<void> {
    // A Queue still checking the server (INFO) when its connection is closed leaves a rejected
    // promise that nobody handles, which ends the process: let the checks end first, for a
    // moment at most (Redis may be gone). Seen on a Cluster, where the check goes to any node.
    await settlesWithin(
      Promise.allSettled(this.all().map((q) => q.waitUntilReady())),
      READY_WAIT_MS,
    );
    await Promise.all(this.all().map((q) => q.close()));
  }
}

/**
 * Moves jobs from a session's outbox into their queues, then off the outbox. With `jobs`, only
 * those (what one transition just wrote); without, the whole outbox (a redelivered event, the
 * sweeper). Draining only one's own jobs matters: coordinators flushing concurrently would
 * otherwise re-add each other's entries many times over. Jobs go in addBulk calls per queue.
 */
export async function flushOutbox(
  store: SessionStore,
  queues: QueueSet,
  sessionId: string,
  jobs?: readonly OutboxJob[],
): Promise<number> {
  const pending = jobs ?? (await store.readOutbox(sessionId));
  if (pending.length === 0) return 0;
  await queues.addAll(pending);
  await store.removeFromOutbox(
    sessionId,
    pending.map((j) => j.jobId),
  );
  return pending.length;
}
