import type { Job, Worker } from 'bullmq';
import { Role } from '../../src/shared/queues.js';
import type { BenchContext, BenchScenario } from '../lib/context.js';
import {
  benchClient,
  benchConfig,
  runSession,
  startInProcessRoles,
  writePlanScenario,
} from '../lib/orq.js';
import { chain } from '../lib/plans.js';
import { RawPipeline } from '../lib/raw-bullmq.js';
import { log } from '../lib/report.js';
import { summarize } from '../lib/stats.js';
import { now } from '../lib/timing.js';

/**
 * Start and finish times of the jobs one BullMQ Worker runs, with performance.now() (BullMQ's
 * own job timestamps have millisecond resolution; a raw hop takes less). 'active' is emitted
 * when the job was fetched and is about to run, 'completed' once it is marked completed: the
 * same instants as processedOn / finishedOn.
 */
class JobClock {
  readonly started = new Map<string, number>();
  readonly finished = new Map<string, number>();

  constructor(
    worker: Worker,
    private readonly key: (job: Job) => string | undefined,
  ) {
    worker.on('active', (job: Job) => this.mark(this.started, job));
    worker.on('completed', (job: Job) => this.mark(this.finished, job));
  }

  private mark(into: Map<string, number>, job: Job): void {
    const k = this.key(job);
    if (k !== undefined) into.set(k, now());
  }

  /** Task i+1 started minus task i finished, for i = 0 … length-2 (keys are the indexes). */
  gaps(length: number): number[] {
    const gaps: number[] = [];
    for (let i = 0; i + 1 < length; i += 1) {
      const done = this.finished.get(String(i));
      const next = this.started.get(String(i + 1));
      if (done !== undefined && next !== undefined) gaps.push(next - done);
    }
    return gaps;
  }

  clear(): void {
    this.started.clear();
    this.finished.clear();
  }
}

/**
 * 5. Latency added per dependency edge: a chain of tasks through orq (every role in this
 * process, zero model latency) and the same chain through raw BullMQ (work → judge →
 * coordinator → next work, no-op processors), measured between a worker finishing task i and
 * the worker starting task i+1.
 */
async function run(ctx: BenchContext): Promise<void> {
  const length = ctx.quick ? 100 : 300;
  const { url, admin } = ctx.redis;
  const config = benchConfig('lat-orq');
  const prefix = config.redis.prefix;
  const roles = await startInProcessRoles(url, config, Role.options);
  const client = await benchClient(url, config);
  const raw = await RawPipeline.startLike(url, 'lat-raw', config);
  let orqGaps: number[] = [];
  let rawGaps: number[] = [];
  try {
    const orqWorker = roles.workers.find((w) => w.name === 'work');
    if (!orqWorker) throw new Error('no work-queue worker among the roles');
    // Chain task ids are t00000, t00001, …: the number is the index.
    const orqClock = new JobClock(orqWorker, (job) => {
      const taskId = (job.data as { taskId?: string }).taskId;
      return taskId ? String(Number(taskId.slice(1))) : undefined;
    });
    const rawClock = new JobClock(raw.workWorker(), (job) => String((job.data as { i: number }).i));
    await runSession(client, admin, prefix, writePlanScenario(ctx.tmpDir, 'chain-10', chain(10)));
    await raw.run(10, 'chain');
    orqClock.clear();
    rawClock.clear();
    await runSession(
      client,
      admin,
      prefix,
      writePlanScenario(ctx.tmpDir, `chain-${length}`, chain(length)),
    );
    orqGaps = orqClock.gaps(length);
    await raw.run(length, 'chain');
    rawGaps = rawClock.gaps(length);
  } finally {
    await client.close();
    await roles.close(5_000);
    await raw.close();
    await ctx.flush();
  }

  const orq = summarize(orqGaps);
  const base = summarize(rawGaps);
  log(
    `latency per edge: orq p50 ${orq.p50.toFixed(1)} ms p95 ${orq.p95.toFixed(1)} ms; raw p50 ${base.p50.toFixed(1)} ms p95 ${base.p95.toFixed(1)} ms`,
  );
  const context = {
    chain_length: length,
    edges: orqGaps.length,
    measured:
      "work job i+1 'active' minus work job i 'completed' (BullMQ worker events, performance.now())",
  };
  for (const [who, s] of [
    ['orq', orq],
    ['raw', base],
  ] as const) {
    ctx.reporter.record({
      name: `latency.${who}_p50_ms`,
      value: s.p50,
      unit: 'ms',
      ...context,
      mean: s.mean,
      max: s.max,
    });
    ctx.reporter.record({
      name: `latency.${who}_p95_ms`,
      value: s.p95,
      unit: 'ms',
      ...context,
      mean: s.mean,
      max: s.max,
    });
  }
  ctx.reporter.record({
    name: 'latency.added_p50_ms',
    value: orq.p50 - base.p50,
    unit: 'ms',
    note: 'orq p50 minus raw BullMQ p50 over the same three hops',
    ...context,
  });
  ctx.reporter.record({
    name: 'latency.added_p95_ms',
    value: orq.p95 - base.p95,
    unit: 'ms',
    note: 'orq p95 minus raw BullMQ p95 over the same three hops',
    ...context,
  });
}

export const latency: BenchScenario = {
  name: 'latency',
  description: 'latency per dependency edge (worker done → dependent started), orq vs raw BullMQ',
  run,
};
