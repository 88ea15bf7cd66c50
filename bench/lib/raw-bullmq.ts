import { Queue, Worker, type Job, type JobsOptions } from 'bullmq';
import { Redis } from 'ioredis';
import type { OrqConfig } from '../../src/shared/config/schema.js';
import { chunked } from '../../src/shared/chunked.js';
import { ADD_BULK_CHUNK } from '../../src/shared/queue-set.js';
import { defaultJobOptions } from '../../src/shared/queues.js';

/**
 * The baseline: raw BullMQ moving jobs through the same queues, in the same order and with
 * the same concurrency, queue options and Redis as orq, with no-op processors. One run mirrors
 * one orq session: plan → judge → coordinator, which adds the work jobs; then per task
 * work → judge → coordinator. So a run of N tasks is 3 + 3N hops, like orq's.
 *
 * `chain` mode adds only the first work job and lets the coordinator hop of task i add the
 * work job of task i+1 (the latency benchmark's chain); `independent` adds all N at once with
 * addBulk, in orq's chunk size, as a careful raw BullMQ user would.
 */

export type RawQueue = 'plan' | 'judge' | 'work' | 'coordinator';

export interface RawPipelineOptions {
  url: string;
  prefix: string;
  concurrency: Record<RawQueue, number>;
  jobOptions: JobsOptions;
  workerOptions: { lockDuration: number; stalledInterval: number; maxStalledCount: number };
}

interface RawJob {
  run: number;
  kind: 'plan' | 'task';
  i: number;
}

interface RunState {
  tasks: number;
  mode: 'independent' | 'chain';
  remaining: number;
  done: (finishedAt: number) => void;
}

export interface RawRun {
  startedAt: number;
  finishedAt: number;
  ms: number;
  hops: number;
}

export class RawPipeline {
  private readonly runs = new Map<number, RunState>();
  private nextRun = 0;

  private constructor(
    private readonly queues: Record<RawQueue, Queue>,
    private readonly workers: Worker[],
    private readonly connections: Redis[],
  ) {}

  /** The baseline for an orq run: same queues' concurrency, job and worker options as `config`. */
  static startLike(url: string, prefix: string, config: OrqConfig): Promise<RawPipeline> {
    return RawPipeline.start({
      url,
      prefix,
      concurrency: {
        plan: config.concurrency.planner,
        judge: config.concurrency.judge,
        work: config.concurrency.worker,
        coordinator: config.concurrency.coordinator,
      },
      jobOptions: defaultJobOptions(config.queues),
      workerOptions: {
        lockDuration: config.queues.lockDurationMs,
        stalledInterval: config.queues.stalledIntervalMs,
        maxStalledCount: 3,
      },
    });
  }

  static async start(options: RawPipelineOptions): Promise<RawPipeline> {
    const shared = new Redis(options.url, { maxRetriesPerRequest: null });
    const connections = [shared];
    const names: RawQueue[] = ['plan', 'judge', 'work', 'coordinator'];
    const queues = Object.fromEntries(
      names.map((name) => [
        name,
        new Queue(name, {
          connection: shared,
          prefix: `{${options.prefix}}`,
          defaultJobOptions: options.jobOptions,
        }),
      ]),
    ) as Record<RawQueue, Queue>;
    const pipeline = new RawPipeline(queues, [], connections);
    for (const name of names) {
      const connection = new Redis(options.url, { maxRetriesPerRequest: null });
      connections.push(connection);
      const worker = new Worker(name, (job: Job<RawJob>) => pipeline.process(name, job), {
        connection,
        prefix: `{${options.prefix}}`,
        concurrency: options.concurrency[name],
        ...options.workerOptions,
      });
      worker.on('error', (error) => process.stderr.write(`raw worker error: ${error.message}\n`));
      pipeline.workers.push(worker);
    }
    await Promise.all(pipeline.workers.map((w) => w.waitUntilReady()));
    return pipeline;
  }

  /** The no-op processors: each only forwards the job to the next queue. */
  private async process(queue: RawQueue, job: Job<RawJob>): Promise<void> {
    const { run, kind, i } = job.data;
    const state = this.runs.get(run);
    if (!state) throw new Error(`unknown raw run ${run}`);
    switch (queue) {
      case 'plan':
        await this.queues.judge.add('judge-plan', { run, kind, i });
        return;
      case 'work':
        await this.queues.judge.add('judge-task', { run, kind, i });
        return;
      case 'judge':
        await this.queues.coordinator.add(kind === 'plan' ? 'plan-judged' : 'task-judged', {
          run,
          kind,
          i,
        });
        return;
      case 'coordinator':
        if (kind === 'plan') {
          if (state.mode === 'chain') {
            await this.queues.work.add('execute', { run, kind: 'task', i: 0 });
          } else {
            // In orq's chunks (ADD_BULK_CHUNK): one huge pipeline can stall on TCP for 200 ms.
            const all = Array.from({ length: state.tasks }, (_, n) => ({
              name: 'execute',
              data: { run, kind: 'task' as const, i: n },
            }));
            for (const slice of chunked(all, ADD_BULK_CHUNK)) await this.queues.work.addBulk(slice);
          }
          return;
        }
        if (state.mode === 'chain' && i + 1 < state.tasks) {
          await this.queues.work.add('execute', { run, kind: 'task', i: i + 1 });
        }
        state.remaining -= 1;
        if (state.remaining === 0) state.done(Date.now());
        return;
    }
  }

  /** Moves one session's worth of jobs (3 + 3N hops) and resolves when the last one is done. */
  async run(tasks: number, mode: 'independent' | 'chain' = 'independent'): Promise<RawRun> {
    const run = this.nextRun++;
    const finished = new Promise<number>((resolve) => {
      this.runs.set(run, { tasks, mode, remaining: tasks, done: resolve });
    });
    const startedAt = Date.now();
    await this.queues.plan.add('plan', { run, kind: 'plan', i: 0 });
    const finishedAt = await finished;
    this.runs.delete(run);
    return { startedAt, finishedAt, ms: finishedAt - startedAt, hops: 3 + 3 * tasks };
  }

  /** The connection the processors add jobs on (the orq roles' shared connection's twin). */
  sharedConnection(): Redis {
    return this.connections[0] as Redis;
  }

  /** The Worker of the work queue (for job start/finish events). */
  workWorker(): Worker {
    const worker = this.workers.find((w) => w.name === 'work');
    if (!worker) throw new Error('raw pipeline has no work worker');
    return worker;
  }

  async close(): Promise<void> {
    await Promise.all(this.workers.map((w) => w.close()));
    await Promise.all(Object.values(this.queues).map((q) => q.close()));
    for (const c of this.connections) c.disconnect();
  }
}
