/**
 * `npm run bench [-- --quick] [--only overhead,shapes,...] [--out DIR]`
 *
 * Runs orq's benchmarks against a private redis-server and raw BullMQ in the same run. Each
 * measurement is one JSON line on stdout ({"name","value","unit",...context}); everything is
 * saved to DIR/<timestamp>.json, DIR/latest.json and a chart DIR/latest.svg.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { cpus, loadavg, platform, release, tmpdir, totalmem } from 'node:os';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import type { BenchContext, BenchScenario } from './lib/context.js';
import type { OrqPod } from './lib/processes.js';
import { repoRoot } from './lib/processes.js';
import { startBenchRedis } from './lib/redis.js';
import { log, Reporter, writeResults, type RunInfo } from './lib/report.js';
import { summaryFigure } from './lib/summary-chart.js';
import { renderFigure } from './lib/chart.js';
import { overhead } from './scenarios/overhead.js';
import { shapes } from './scenarios/shapes.js';
import { scaling } from './scenarios/scaling.js';
import { judgeNoise } from './scenarios/judge-noise.js';
import { latency } from './scenarios/latency.js';
import { startup } from './scenarios/startup.js';
import { fairness } from './scenarios/fairness.js';
import { quota } from './scenarios/quota.js';
import { fairQuota, fairQuotaTenants } from './scenarios/fair-quota.js';
import { tracing } from './scenarios/tracing.js';

const SCENARIOS: BenchScenario[] = [
  overhead,
  shapes,
  scaling,
  judgeNoise,
  latency,
  startup,
  quota,
  fairness,
  fairQuota,
  fairQuotaTenants,
  tracing,
];

const USAGE = `usage: npm run bench -- [--quick] [--only ${SCENARIOS.map((s) => s.name).join(',')}] [--out DIR]`;

function parseCli(argv: string[]): { quick: boolean; only?: string[]; out: string } {
  const { values } = parseArgs({
    args: argv,
    options: {
      quick: { type: 'boolean', default: false },
      only: { type: 'string' },
      out: { type: 'string' },
      help: { type: 'boolean', short: 'h', default: false },
    },
    strict: true,
  });
  if (values.help) {
    process.stderr.write(
      `${USAGE}\n\n${SCENARIOS.map((s) => `  ${s.name.padEnd(12)} ${s.description}`).join('\n')}\n`,
    );
    process.exit(0);
  }
  const only = values.only
    ?.split(',')
    .map((s) => s.trim())
    .filter(Boolean);
  const unknown = only?.filter((name) => !SCENARIOS.some((s) => s.name === name)) ?? [];
  if (unknown.length > 0) {
    process.stderr.write(`unknown benchmark(s): ${unknown.join(', ')}\n${USAGE}\n`);
    process.exit(2);
  }
  return {
    quick: values.quick,
    ...(only ? { only } : {}),
    out: resolve(values.out ?? join(repoRoot, 'bench/results')),
  };
}

function packageVersion(name: string): string {
  try {
    const pkg = JSON.parse(
      readFileSync(join(repoRoot, 'node_modules', name, 'package.json'), 'utf8'),
    ) as { version?: string };
    return pkg.version ?? 'unknown';
  } catch {
    return 'unknown';
  }
}

async function main(): Promise<void> {
  const options = parseCli(process.argv.slice(2));
  const selected = SCENARIOS.filter((s) => !options.only || options.only.includes(s.name));
  const startedAt = new Date();
  const reporter = new Reporter();
  const redis = await startBenchRedis();
  const tmpDir = mkdtempSync(join(tmpdir(), 'orq-bench-'));
  const pods = new Set<OrqPod>();
  const ctx: BenchContext = {
    quick: options.quick,
    redis,
    reporter,
    tmpDir,
    pods,
    flush: async () => {
      await redis.admin.flushall();
    },
  };
  const run: RunInfo = {
    startedAt: startedAt.toISOString(),
    quick: options.quick,
    ...(options.only ? { only: options.only } : {}),
    machine: {
      cpus: cpus().length,
      cpuModel: cpus()[0]?.model ?? 'unknown',
      memoryGiB: Math.round(totalmem() / 2 ** 30),
      os: `${platform()} ${release()}`,
      node: process.version,
      redis: redis.version,
      bullmq: packageVersion('bullmq'),
      ioredis: packageVersion('ioredis'),
      loadAverageAtStart: loadavg().map((l) => Number(l.toFixed(2))),
    },
  };
  log(`redis-server ${redis.version} at ${redis.url}; ${options.quick ? 'quick' : 'full'} run`);

  let failed = false;
  const stopAll = async () => {
    await Promise.all([...pods].map((p) => p.stop()));
    pods.clear();
  };
  const onSignal = () => {
    void stopAll().finally(() => process.exit(130));
  };
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  try {
    for (const scenario of selected) {
      const t0 = Date.now();
      log(`== ${scenario.name}: ${scenario.description}`);
      try {
        await scenario.run(ctx);
      } catch (error) {
        failed = true;
        log(
          `${scenario.name} failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`,
        );
      } finally {
        await stopAll();
      }
      log(`${scenario.name} took ${((Date.now() - t0) / 1000).toFixed(1)} s`);
    }
  } finally {
    await stopAll();
    await redis.stop();
    rmSync(tmpDir, { recursive: true, force: true });
  }

  const finishedAt = new Date();
  run.finishedAt = finishedAt.toISOString();
  run.durationS = Math.round((finishedAt.getTime() - startedAt.getTime()) / 100) / 10;
  run.machine.loadAverageAtEnd = loadavg().map((l) => Number(l.toFixed(2)));
  const svg = renderFigure(summaryFigure(reporter.measurements, run));
  const files = writeResults(options.out, run, reporter.measurements, svg);
  log(
    `${reporter.measurements.length} measurements in ${run.durationS} s; wrote ${files.join(', ')}`,
  );
  process.exit(failed ? 1 : 0);
}

main().catch((error: unknown) => {
  process.stderr.write(
    `${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`,
  );
  process.exit(1);
});
