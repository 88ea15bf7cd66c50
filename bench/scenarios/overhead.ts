import { Role } from '../../src/shared/queues.js';
import { CommandTally, countEveryConnection } from '../lib/command-counter.js';
import type { BenchContext, BenchScenario } from '../lib/context.js';
import {
  benchClient,
  benchConfig,
  runSession,
  startInProcessRoles,
  writePlanScenario,
} from '../lib/orq.js';
import { independentTasks } from '../lib/plans.js';
import { RawPipeline } from '../lib/raw-bullmq.js';
import { prefixBytes, redisUsage, topCalls, usageDelta, type PrefixBytes } from '../lib/redis.js';
import { log } from '../lib/report.js';
import { median } from '../lib/stats.js';
import { cpuMsSince } from '../lib/timing.js';

/** The session size of the headline `overhead_ratio`, the same in quick and full runs. */
const HEADLINE_TASKS = 1000;
/** Discarded sessions per side before the first measured round. */
const WARMUP_SESSIONS = 3;

interface Sample {
  ms: number;
  nodeCpuMs: number;
  redisCpuMs: number;
  redisCalls: number;
  calls: Record<string, number>;
}

interface SizeResult {
  tasks: number;
  rounds: number;
  orq: Sample[];
  raw: Sample[];
  orqCommands: Record<string, number>;
  rawCommands: Record<string, number>;
  /** Every connection's commands (all but the bench's own admin connection). */
  orqAll: Record<string, number>;
  rawAll: Record<string, number>;
}

const pick = (samples: Sample[], key: 'ms' | 'nodeCpuMs' | 'redisCpuMs' | 'redisCalls') =>
  median(samples.map((s) => s[key]));

/** Commands per task, sorted, with their total. */
function perTask(counts: Record<string, number>, runs: number) {
  const sorted = Object.entries(counts).sort((a, b) => b[1] - a[1]);
  return {
    total: sorted.reduce((a, [, n]) => a + n, 0) / runs,
    byCommand: Object.fromEntries(sorted.map(([name, n]) => [name, n / runs])),
  };
}

/**
 * 1. Overhead: one session of N independent tasks through orq (every role in this process,
 * zero-latency scripted builtin provider) against raw BullMQ moving the same 3 + 3N hops with
 * no-op processors, same concurrency, same Redis, alternating rounds. The headline is N = 1000;
 * a full run also measures 250 and 2,000 to show how the ratio moves with the session's size.
 */
async function run(ctx: BenchContext): Promise<void> {
  const sizes = ctx.quick
    ? [{ tasks: HEADLINE_TASKS, rounds: 5 }]
    : [
        { tasks: 250, rounds: 3 },
        { tasks: HEADLINE_TASKS, rounds: 5 },
        { tasks: 2000, rounds: 3 },
      ];
  const { url, admin } = ctx.redis;
  const config = benchConfig('ovh-orq');
  const prefix = config.redis.prefix;
  // Warm-up at the first measured size, both sides, discarded: the first sessions of a size
  // pay for JIT compilation of its paths (orq's still got faster in the second).
  const warmupTasks = sizes[0]?.tasks ?? HEADLINE_TASKS;
  const warmup = writePlanScenario(
    ctx.tmpDir,
    `warmup-${warmupTasks}`,
    independentTasks(warmupTasks),
  );

  const roles = await startInProcessRoles(url, config, Role.options);
  const client = await benchClient(url, config);
  const raw = await RawPipeline.startLike(url, 'ovh-raw', config);

  const measure = async (fn: () => Promise<number>): Promise<Sample> => {
    const redisBefore = await redisUsage(admin);
    const cpu = process.cpuUsage();
    const ms = await fn();
    const nodeCpuMs = cpuMsSince(cpu);
    const delta = usageDelta(redisBefore, await redisUsage(admin));
    return {
      ms,
      nodeCpuMs,
      redisCpuMs: delta.cpuMs,
      redisCalls: delta.totalCalls,
      calls: delta.calls,
    };
  };

  // Commands the processors send on the roles' shared connection (state reads, state writes,
  // job adds); BullMQ's own fetch/finish commands go on each Worker's connection, alike for both.
  const orqTally = new CommandTally();
  const rawTally = new CommandTally();
  // And every round trip of each side, whichever connection it takes (BullMQ's fetches and
  // finishes, a delivery's lock checks): counted while that side's round runs. Set up first,
  // so the shared connections' own counters below pass their commands on to it.
  const orqAll = new CommandTally();
  const rawAll = new CommandTally();
  const every = countEveryConnection([admin]);
  orqTally.attach(roles.store.redis);
  rawTally.attach(raw.sharedConnection());
  const results: SizeResult[] = [];
  let memory: Memory | undefined;
  try {
    for (let i = 0; i < WARMUP_SESSIONS; i += 1) {
      await runSession(client, admin, prefix, warmup);
      await raw.run(warmupTasks);
    }
    // What the warm-up's finished tasks cost in Redis, their jobs kept as retention keeps them
    // (fewer than removeOnCompleteCount per queue, so none removed yet).
    memory = {
      finishedTasks: WARMUP_SESSIONS * warmupTasks,
      orq: await prefixBytes(admin, prefix),
      raw: await prefixBytes(admin, 'ovh-raw'),
    };
    for (const { tasks, rounds } of sizes) {
      const scenario = writePlanScenario(
        ctx.tmpDir,
        `independent-${tasks}`,
        independentTasks(tasks),
      );
      const result: SizeResult = {
        tasks,
        rounds,
        orq: [],
        raw: [],
        orqCommands: {},
        rawCommands: {},
        orqAll: {},
        rawAll: {},
      };
      orqTally.take();
      rawTally.take();
      orqAll.take();
      rawAll.take();
      for (let round = 0; round < rounds; round += 1) {
        every.into(orqAll);
        const orq = await measure(
          async () => (await runSession(client, admin, prefix, scenario)).ms,
        );
        every.into(rawAll);
        const base = await measure(async () => (await raw.run(tasks)).ms);
        every.into(undefined);
        result.orq.push(orq);
        result.raw.push(base);
        log(
          `overhead ${tasks} tasks, round ${round + 1}/${rounds}: orq ${orq.ms} ms, raw ${base.ms} ms`,
        );
      }
      result.orqCommands = orqTally.take();
      result.rawCommands = rawTally.take();
      result.orqAll = orqAll.take();
      result.rawAll = rawAll.take();
      results.push(result);
    }
  } finally {
    every.restore();
    await client.close();
    await roles.close(5_000);
    await raw.close();
    await ctx.flush();
  }

  for (const result of results) report(ctx, config.concurrency, result);
  if (memory) reportMemory(ctx, memory, config.queues.removeOnCompleteCount);
}

interface Memory {
  finishedTasks: number;
  orq: PrefixBytes;
  raw: PrefixBytes;
}

/** Redis bytes per finished task, orq's (jobs and state) and raw BullMQ's (jobs). */
function reportMemory(ctx: BenchContext, memory: Memory, retainedPerQueue: number): void {
  const per = (bytes: number) => Math.round(bytes / memory.finishedTasks);
  ctx.reporter.record({
    name: 'overhead.redis_bytes_per_finished_task',
    value: per(memory.orq.jobs + memory.orq.state),
    unit: 'bytes/task',
    note: `MEMORY USAGE of every key under the prefix after ${memory.finishedTasks} finished tasks, jobs retained (up to ${retainedPerQueue} per queue)`,
    jobs_bytes_per_task: per(memory.orq.jobs),
    state_bytes_per_task: per(memory.orq.state),
    raw_jobs_bytes_per_task: per(memory.raw.jobs),
    keys: memory.orq.keys,
  });
}

function report(
  ctx: BenchContext,
  concurrency: Record<string, number>,
  { tasks, rounds, orq, raw, orqCommands, rawCommands, orqAll, rawAll }: SizeResult,
): void {
  const headline = tasks === HEADLINE_TASKS;
  const suffix = headline ? '' : `.tasks_${tasks}`;
  const hops = 3 + 3 * tasks;
  const orqHops = hops / (pick(orq, 'ms') / 1000);
  const rawHops = hops / (pick(raw, 'ms') / 1000);
  const common = {
    tasks,
    hops_per_run: hops,
    rounds,
    concurrency,
    provider: 'builtin, scripted plan, zero latency',
  };
  ctx.reporter.record({
    name: `overhead_ratio${suffix}`,
    value: orqHops / rawHops,
    unit: 'ratio',
    goal: '>= 0.7',
    orq_hops_per_s: orqHops,
    raw_hops_per_s: rawHops,
    orq_tasks_per_s: tasks / (pick(orq, 'ms') / 1000),
    // Each round's own ratio (raw ms / orq ms of that round): the spread behind the median.
    round_ratios: orq.map((o, i) => (raw[i]?.ms ?? 0) / o.ms),
    ...common,
  });
  if (!headline) return;

  const per = (samples: Sample[], key: 'nodeCpuMs' | 'redisCpuMs' | 'redisCalls') =>
    pick(samples, key) / tasks;
  const orqClient = perTask(orqCommands, rounds * tasks);
  const rawClient = perTask(rawCommands, rounds * tasks);
  ctx.reporter.record({
    name: 'overhead.orq_hops_per_s',
    value: orqHops,
    unit: 'hops/s',
    ...common,
  });
  ctx.reporter.record({
    name: 'overhead.raw_hops_per_s',
    value: rawHops,
    unit: 'hops/s',
    ...common,
  });
  ctx.reporter.record({
    name: 'overhead.orq_tasks_per_s',
    value: tasks / (pick(orq, 'ms') / 1000),
    unit: 'tasks/s',
    run_ms: pick(orq, 'ms'),
    ...common,
  });
  ctx.reporter.record({
    name: 'overhead.raw_tasks_per_s',
    value: tasks / (pick(raw, 'ms') / 1000),
    unit: 'tasks/s',
    run_ms: pick(raw, 'ms'),
    ...common,
  });
  ctx.reporter.record({
    name: 'overhead.orq_client_commands_per_task',
    value: orqClient.total,
    unit: 'commands/task',
    note: "sent by the roles' processors on their shared connection (each one round trip)",
    by_command: orqClient.byCommand,
    tasks,
  });
  ctx.reporter.record({
    name: 'overhead.raw_client_commands_per_task',
    value: rawClient.total,
    unit: 'commands/task',
    by_command: rawClient.byCommand,
    tasks,
  });
  const orqEvery = perTask(orqAll, rounds * tasks);
  const rawEvery = perTask(rawAll, rounds * tasks);
  ctx.reporter.record({
    name: 'overhead.orq_round_trips_per_task',
    value: orqEvery.total,
    unit: 'commands/task',
    note: "every command orq's connections send (BullMQ's fetches, finishes and lock checks too; blocking fetches included)",
    by_command: orqEvery.byCommand,
    tasks,
  });
  ctx.reporter.record({
    name: 'overhead.raw_round_trips_per_task',
    value: rawEvery.total,
    unit: 'commands/task',
    by_command: rawEvery.byCommand,
    tasks,
  });
  ctx.reporter.record({
    name: 'overhead.orq_redis_calls_per_task',
    value: per(orq, 'redisCalls'),
    unit: 'calls/task',
    note: 'INFO commandstats: commands run inside Lua scripts are counted too',
    top: topCalls(orq.at(-1)?.calls ?? {}, tasks),
    tasks,
  });
  ctx.reporter.record({
    name: 'overhead.raw_redis_calls_per_task',
    value: per(raw, 'redisCalls'),
    unit: 'calls/task',
    top: topCalls(raw.at(-1)?.calls ?? {}, tasks),
    tasks,
  });
  ctx.reporter.record({
    name: 'overhead.orq_node_cpu_ms_per_task',
    value: per(orq, 'nodeCpuMs'),
    unit: 'ms/task',
    redis_cpu_ms_per_task: per(orq, 'redisCpuMs'),
    tasks,
  });
  ctx.reporter.record({
    name: 'overhead.raw_node_cpu_ms_per_task',
    value: per(raw, 'nodeCpuMs'),
    unit: 'ms/task',
    redis_cpu_ms_per_task: per(raw, 'redisCpuMs'),
    tasks,
  });
  // The bench process and redis-server share the machine's cores, so a session's run time
  // follows the CPU both spend on it: this ratio predicts overhead_ratio (compare the two).
  const cpu = (samples: Sample[]) => per(samples, 'nodeCpuMs') + per(samples, 'redisCpuMs');
  ctx.reporter.record({
    name: 'overhead.cpu_ratio',
    value: cpu(raw) / cpu(orq),
    unit: 'ratio',
    note: "raw BullMQ's Node + Redis CPU per task over orq's",
    orq_cpu_ms_per_task: cpu(orq),
    raw_cpu_ms_per_task: cpu(raw),
    tasks,
  });
}

export const overhead: BenchScenario = {
  name: 'overhead',
  description: 'orq hop throughput vs raw BullMQ (same queues, concurrency, Redis)',
  run,
};
