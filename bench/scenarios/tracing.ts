import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { context, propagation, trace } from '@opentelemetry/api';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import { BatchSpanProcessor, NodeTracerProvider } from '@opentelemetry/sdk-trace-node';
import { Role } from '../../src/shared/queues.js';
import type { BenchContext, BenchScenario } from '../lib/context.js';
import {
  benchClient,
  benchConfig,
  runSession,
  startInProcessRoles,
  writePlanScenario,
} from '../lib/orq.js';
import { independentTasks } from '../lib/plans.js';
import { log } from '../lib/report.js';
import { pairedSummary, pairOrder, type PairedSummary } from '../lib/paired.js';

/** Discarded sessions per side before the first measured round. */
const WARMUP_SESSIONS = 2;

/** An OTLP/HTTP endpoint that reads and drops what it is sent: the export's cost stays in. */
async function startSink(): Promise<{ server: Server; url: string; requests: () => number }> {
  let requests = 0;
  const server = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      requests += 1;
      // An empty ExportTraceServiceResponse in protobuf: no bytes at all.
      res.writeHead(200, { 'content-type': 'application/x-protobuf' }).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return { server, url: `http://127.0.0.1:${port}/v1/traces`, requests: () => requests };
}

/** Milliseconds of this process's CPU (user and system) since `started`. */
const cpuMsSince = (started: NodeJS.CpuUsage): number => {
  const { user, system } = process.cpuUsage(started);
  return (user + system) / 1000;
};

/** A paired summary's spread, as the result line records it: `pair_q1` ... `pair_high`. */
const spread = (summary: PairedSummary, prefix: string) => ({
  [`${prefix}_q1`]: summary.q1,
  [`${prefix}_q3`]: summary.q3,
  [`${prefix}_low`]: summary.low,
  [`${prefix}_high`]: summary.high,
});

/**
 * Tracing on against off, in the same process and run: one session of N independent tasks
 * (every role in this process, zero-latency builtin provider) per side and round, with no
 * tracer provider (the API's no-op, what a pod without OTEL_* endpoint runs) or with the SDK's
 * provider, batch processor and OTLP/HTTP protobuf exporter (orq's default) sending every span
 * to a local sink. Each round is a pair, run off-on and on-off in turn (ABBA), so drift (a
 * growing Redis, a GC debt, the other tenants of a shared machine) falls on both sides alike.
 * The headline `tracing_overhead_ratio` is the median over pairs of traced over untraced hops
 * per CPU second of this process (1 = free), with the middle half and the extremes of the pairs'
 * ratios beside it: what tracing adds is CPU work in this process. The wall-clock ratio of
 * hops/s (`wall_ratio`, beside it) moves with a shared machine's other tenants (single pairs
 * 0.3-2.2 on 2 busy cores), this process's CPU time much less.
 */
async function run(ctx: BenchContext): Promise<void> {
  const tasks = ctx.quick ? 100 : 200;
  const rounds = ctx.quick ? 12 : 24;
  const { url, admin } = ctx.redis;
  const config = benchConfig('trc');
  const prefix = config.redis.prefix;
  const sink = await startSink();
  const provider = new NodeTracerProvider({
    spanProcessors: [new BatchSpanProcessor(new OTLPTraceExporter({ url: sink.url }))],
  });
  const tracing = (on: boolean) => {
    if (on) {
      provider.register();
    } else {
      trace.disable();
      context.disable();
      propagation.disable();
    }
  };
  const roles = await startInProcessRoles(url, config, Role.options);
  const client = await benchClient(url, config);
  const scenario = writePlanScenario(ctx.tmpDir, `tracing-${tasks}`, independentTasks(tasks));
  // 'base' is tracing off, 'change' tracing on (bench/lib/paired.ts's names).
  const runSide = async (on: boolean) => {
    tracing(on);
    const started = process.cpuUsage();
    const { ms } = await runSession(client, admin, prefix, scenario);
    // The spans still buffered go out inside the traced side's CPU time, not the next side's.
    if (on) await provider.forceFlush();
    return { ms, cpuMs: cpuMsSince(started) };
  };
  const ms = { off: [] as number[], on: [] as number[] };
  const cpuMs = { off: [] as number[], on: [] as number[] };
  try {
    for (let i = 0; i < WARMUP_SESSIONS; i += 1) {
      for (const side of pairOrder(i)) await runSide(side === 'change');
    }
    for (let round = 0; round < rounds; round += 1) {
      for (const side of pairOrder(round)) {
        const key = side === 'change' ? 'on' : 'off';
        const measured = await runSide(key === 'on');
        ms[key].push(measured.ms);
        cpuMs[key].push(measured.cpuMs);
      }
      log(
        `tracing ${tasks} tasks, round ${round + 1}/${rounds}: off ${ms.off.at(-1)} ms, on ${ms.on.at(-1)} ms`,
      );
    }
  } finally {
    tracing(false);
    await provider.shutdown();
    await client.close();
    await roles.close(5_000);
    await new Promise((resolve) => sink.server.close(resolve));
    await ctx.flush();
  }
  const hops = 3 + 3 * tasks;
  // Per pair, traced over untraced hops per CPU second (and per wall second): the untraced
  // side's cost over the traced side's.
  const cpu = pairedSummary(cpuMs.on, cpuMs.off);
  const wall = pairedSummary(ms.on, ms.off);
  ctx.reporter.record({
    name: 'tracing_overhead_ratio',
    value: cpu.ratio,
    unit: 'ratio',
    goal: '>= 0.9',
    note: 'traced over untraced hops per CPU second of this process, median over pairs',
    ...spread(cpu, 'pair'),
    wall_ratio: wall.ratio,
    ...spread(wall, 'wall'),
    traced_cpu_ms_per_hop: cpu.baseMedian / hops,
    untraced_cpu_ms_per_hop: cpu.changeMedian / hops,
    traced_hops_per_s: hops / (wall.baseMedian / 1000),
    untraced_hops_per_s: hops / (wall.changeMedian / 1000),
    pair_ratios: cpuMs.on.map((traced, i) => (cpuMs.off[i] ?? 0) / traced),
    export_requests: sink.requests(),
    tasks,
    hops_per_run: hops,
    rounds,
    order: 'pairs alternate off-on and on-off (ABBA)',
    exporter: 'OTLP/HTTP protobuf to a local sink',
    provider: 'builtin, scripted plan, zero latency',
  });
}

export const tracing: BenchScenario = {
  name: 'tracing',
  description: 'OpenTelemetry tracing on against off in the same run (tracing_overhead_ratio)',
  run,
};
