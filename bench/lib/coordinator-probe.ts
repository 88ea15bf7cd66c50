import { Worker, type Job } from 'bullmq';
import { Redis } from 'ioredis';
import type { OrqConfig } from '../../src/shared/config/schema.js';
import { silentLogger } from '../../src/shared/logger.js';
import { QueueSet } from '../../src/shared/queue-set.js';
import { bullPrefix, defaultJobOptions, type OutboxJob } from '../../src/shared/queues.js';
import type {
  ApplyResult,
  Changeset,
  SessionSnapshot,
  TaskSnapshot,
} from '../../src/shared/store/session-records.js';
import { SessionStore } from '../../src/shared/store/session-store.js';
import { applyEvent } from '../../src/workers/coordinator/coordinator.js';
import { countCommands } from './command-counter.js';
import { now } from './timing.js';

/**
 * The coordinator role run inside the bench process with a stopwatch around each call of
 * `applyEvent` — the same function the registry's coordinator processor calls, on the same
 * store and queues, so runtime semantics are unchanged. The store and queue set are
 * subclasses that time each method, and the connection counts every command it sends, which
 * splits an event's cost into Redis round trips and Node-side work.
 */

export type Part =
  'loadSession' | 'loadTasks' | 'apply' | 'readOutbox' | 'removeOutbox' | 'queueAdd';

export interface EventRecord {
  name: string;
  ms: number;
  /** Time with at least one command of this event in flight (round trips incl. Redis work). */
  redisMs: number;
  parts: Partial<Record<Part, number>>;
  commands: Record<string, number>;
}

export class Probe {
  records: EventRecord[] = [];
  private current: EventRecord | undefined;
  private inFlight = 0;
  private inFlightSince = 0;

  begin(name: string): void {
    this.current = { name, ms: 0, redisMs: 0, parts: {}, commands: {} };
  }

  end(ms: number): void {
    if (!this.current) return;
    this.current.ms = ms;
    this.records.push(this.current);
    this.current = undefined;
  }

  reset(): EventRecord[] {
    const records = this.records;
    this.records = [];
    return records;
  }

  async time<T>(part: Part, fn: () => Promise<T>): Promise<T> {
    const started = now();
    try {
      return await fn();
    } finally {
      const rec = this.current;
      if (rec) rec.parts[part] = (rec.parts[part] ?? 0) + (now() - started);
    }
  }

  commandSent(name: string, done: Promise<unknown>): void {
    const rec = this.current;
    if (!rec) return;
    rec.commands[name] = (rec.commands[name] ?? 0) + 1;
    if (this.inFlight++ === 0) this.inFlightSince = now();
    const settle = () => {
      if (--this.inFlight === 0) rec.redisMs += now() - this.inFlightSince;
    };
    done.then(settle, settle);
  }
}

class TimedStore extends SessionStore {
  constructor(
    redis: Redis,
    prefix: string,
    historyMaxLength: number,
    private readonly probe: Probe,
  ) {
    super(redis, prefix, historyMaxLength);
  }
  override loadSession(sessionId: string): Promise<SessionSnapshot | undefined> {
    return this.probe.time('loadSession', () => super.loadSession(sessionId));
  }
  override loadTasks(
    sessionId: string,
    ids: readonly string[],
  ): Promise<Map<string, TaskSnapshot>> {
    return this.probe.time('loadTasks', () => super.loadTasks(sessionId, ids));
  }
  override apply(sessionId: string, changeset: Changeset): Promise<ApplyResult> {
    return this.probe.time('apply', () => super.apply(sessionId, changeset));
  }
  override readOutbox(sessionId: string): Promise<OutboxJob[]> {
    return this.probe.time('readOutbox', () => super.readOutbox(sessionId));
  }
  override removeFromOutbox(sessionId: string, jobIds: string[]): Promise<void> {
    return this.probe.time('removeOutbox', () => super.removeFromOutbox(sessionId, jobIds));
  }
}

class TimedQueueSet extends QueueSet {
  constructor(
    connection: Redis,
    prefix: string,
    options: ReturnType<typeof defaultJobOptions>,
    private readonly probe: Probe,
  ) {
    super(connection, prefix, options);
  }
  override add(job: OutboxJob): Promise<void> {
    return this.probe.time('queueAdd', () => super.add(job));
  }
}

export interface ProbedCoordinator {
  probe: Probe;
  close(): Promise<void>;
}

/**
 * Starts the coordinator role in this process with the registry's worker options, at
 * concurrency 1: one event at a time, so each event's wall time is its own cost (and the
 * probe's "current event" is never shared).
 */
export async function startProbedCoordinator(
  url: string,
  config: OrqConfig,
): Promise<ProbedCoordinator> {
  const probe = new Probe();
  const redis = new Redis(url, { maxRetriesPerRequest: null });
  const store = new TimedStore(redis, config.redis.prefix, config.queues.historyMaxLength, probe);
  const queues = new TimedQueueSet(
    redis,
    config.redis.prefix,
    defaultJobOptions(config.queues),
    probe,
  );
  countCommands(redis, (name, reply) => probe.commandSent(name, reply));
  const ctx = { store, queues, logger: silentLogger };
  const workerConnection = new Redis(url, { maxRetriesPerRequest: null });
  const worker = new Worker(
    'coordinator',
    async (job: Job) => {
      if (!job.id) throw new Error('coordinator job without id');
      probe.begin(job.name);
      const started = now();
      try {
        return await applyEvent(ctx, job.name, job.data, job.id);
      } finally {
        probe.end(now() - started);
      }
    },
    {
      connection: workerConnection,
      prefix: bullPrefix(config.redis.prefix),
      concurrency: 1,
      lockDuration: config.queues.lockDurationMs,
      stalledInterval: config.queues.stalledIntervalMs,
      maxStalledCount: 3,
    },
  );
  worker.on('error', (error) => process.stderr.write(`coordinator error: ${error.message}\n`));
  await worker.waitUntilReady();
  return {
    probe,
    async close() {
      await worker.close();
      await queues.close();
      redis.disconnect();
      workerConnection.disconnect();
    },
  };
}
