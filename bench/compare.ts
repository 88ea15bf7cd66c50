/**
 * `npm run bench:compare -- BASE [CHANGE] [--tasks N] [--rounds N] [--warmup N]`
 *
 * An A/B measurement of two builds of orq in one process, for changes too small for
 * `npm run bench` to resolve: one run's rounds spread by 10 % or more, as the machine's load
 * moves. BASE and CHANGE are git revisions; without CHANGE the working tree is measured. Each
 * revision is checked out in a temporary git worktree and built (`npm run build`; `npm ci` too
 * when its package-lock.json differs from the working tree's, else it shares node_modules),
 * then both builds run every role in this process on one private redis-server, each under its
 * own prefix, and sessions of N independent tasks alternate between them, base first in even
 * rounds and change first in odd ones. A round's two sessions are a pair: machine drift hits
 * both alike, so the median of the pairs' ratios resolves a few percent where the unpaired
 * medians of `npm run bench` cannot.
 *
 * Prints JSON lines like the benchmarks: `compare.session_ms` and `compare.node_cpu_ms`, each
 * the median of change ÷ base over the rounds (below 1: the change costs less), with the spread.
 * Each round also moves the same jobs through raw BullMQ (the overhead benchmark's baseline), so
 * `compare.overhead_ratio` gives both builds' overhead_ratio from the same rounds, and
 * `compare.round_trips_per_task` every command each build's connections sent per task.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import type { Redis } from 'ioredis';
import { Role } from '../src/shared/queues.js';
import { CommandTally, countEveryConnection } from './lib/command-counter.js';
import { benchConfig, pollSessionEnd, writePlanScenario } from './lib/orq.js';
import { independentTasks } from './lib/plans.js';
import { RawPipeline } from './lib/raw-bullmq.js';
import { median } from './lib/stats.js';
import { pairedSummary, pairOrder, type Side } from './lib/paired.js';
import { repoRoot } from './lib/processes.js';
import { prefixBytes, startBenchRedis } from './lib/redis.js';
import { log, Reporter } from './lib/report.js';
import { cpuMsSince } from './lib/timing.js';

const USAGE =
  'usage: npm run bench:compare -- BASE [CHANGE] [--tasks N] [--rounds N] [--warmup N]\n' +
  '  BASE, CHANGE: git revisions (CHANGE defaults to the working tree)';

interface Options {
  base: string;
  change?: string;
  tasks: number;
  rounds: number;
  warmup: number;
}

function wholeNumber(name: string, value: string | undefined, fallback: number, min: number) {
  if (value === undefined) return fallback;
  const n = Number(value);
  if (!Number.isInteger(n) || n < min) {
    process.stderr.write(`--${name} takes a whole number of at least ${min}, got "${value}"\n`);
    process.exit(2);
  }
  return n;
}

function parseCli(argv: string[]): Options {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    strict: true,
    options: {
      tasks: { type: 'string' },
      rounds: { type: 'string' },
      warmup: { type: 'string' },
      help: { type: 'boolean', short: 'h', default: false },
    },
  });
  if (values.help || positionals.length === 0 || positionals.length > 2) {
    process.stderr.write(`${USAGE}\n`);
    process.exit(values.help ? 0 : 2);
  }
  const [base, change] = positionals as [string, string | undefined];
  return {
    base,
    ...(change ? { change } : {}),
    tasks: wholeNumber('tasks', values.tasks, 1000, 1),
    rounds: wholeNumber('rounds', values.rounds, 10, 1),
    warmup: wholeNumber('warmup', values.warmup, 3, 0),
  };
}

const run = (cmd: string, args: string[], cwd: string) =>
  execFileSync(cmd, args, { cwd, encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'] }).trim();

/** A revision's source, checked out and built; `remove` drops its worktree. */
interface Checkout {
  label: string;
  dir: string;
  remove(): void;
}

/** `revision` checked out and built in `dir` (a side of its own: BASE and CHANGE may be one). */
function checkout(revision: string, dir: string): Checkout {
  let sha: string;
  try {
    sha = run('git', ['rev-parse', '--verify', '--quiet', `${revision}^{commit}`], repoRoot);
  } catch {
    throw new Error(`"${revision}" is not a revision of this repository`);
  }
  const label = `${revision} (${sha.slice(0, 10)})`;
  log(`checking out ${label} into ${dir}`);
  run('git', ['worktree', 'add', '--detach', '--quiet', dir, sha], repoRoot);
  const remove = () => {
    run('git', ['worktree', 'remove', '--force', dir], repoRoot);
  };
  try {
    const lock = (root: string) => readFileSync(join(root, 'package-lock.json'), 'utf8');
    if (lock(dir) === lock(repoRoot)) {
      symlinkSync(join(repoRoot, 'node_modules'), join(dir, 'node_modules'), 'dir');
    } else {
      log(`${label} locks other dependencies: npm ci there`);
      run('npm', ['ci', '--no-audit', '--no-fund', '--loglevel=error'], dir);
    }
    build(label, dir);
  } catch (error) {
    remove();
    throw error;
  }
  return { label, dir, remove };
}

function build(label: string, dir: string): void {
  log(`building ${label}`);
  run('npm', ['run', '--silent', 'build'], dir);
}

/** What the harness uses of one build, imported from its dist/ (its own module instances). */
interface Build {
  startRoles(options: Record<string, unknown>): Promise<{ close(ms?: number): Promise<void> }>;
  createClient(options: Record<string, unknown>): Promise<{
    submit(request: Record<string, unknown>): Promise<{ id: string }>;
    close(): Promise<void>;
  }>;
  parseConfig(input: unknown, source: string): unknown;
  sessionKeys(prefix: string, sessionId: string): { meta: string };
  silentLogger: unknown;
}

async function loadBuild(dir: string): Promise<Build> {
  const load = (path: string) =>
    import(pathToFileURL(join(dir, 'dist', path)).href) as Promise<Record<string, unknown>>;
  const [registry, client, config, keys, logger] = await Promise.all([
    load('workers/registry.js'),
    load('producers/client.js'),
    load('shared/config/load.js'),
    load('shared/store/keys.js'),
    load('shared/logger.js'),
  ]);
  return {
    startRoles: registry.startRoles as Build['startRoles'],
    createClient: client.createClient as Build['createClient'],
    parseConfig: config.parseConfig as Build['parseConfig'],
    sessionKeys: keys.sessionKeys as Build['sessionKeys'],
    silentLogger: logger.silentLogger,
  };
}

/** One build's roles and client, under its own prefix on the shared Redis. */
interface Contender {
  runSession(): Promise<number>;
  close(): Promise<void>;
}

async function startContender(
  label: string,
  build: Build,
  url: string,
  prefix: string,
  admin: Redis,
  scenarioPath: string,
): Promise<Contender> {
  const config = build.parseConfig({ redis: { prefix }, logLevel: 'silent' }, 'compare config');
  const roles = await build.startRoles({
    roles: Role.options,
    connection: url,
    config,
    logger: build.silentLogger,
  });
  const client = await build.createClient({ connection: url, config });
  return {
    // From submit to the coordinator's own COMPLETED stamp, so the polling does not count.
    async runSession() {
      const submittedAt = Date.now();
      const { id } = await client.submit({
        instruction: 'benchmark session',
        config: { llm: { scenario: scenarioPath } },
      });
      const meta = build.sessionKeys(prefix, id).meta;
      // The record as that build wrote it: only its own schema need parse it, so no parse here.
      const { state, data } = await pollSessionEnd(admin, meta, id);
      if (state !== 'COMPLETED') throw new Error(`${label}: session ${id} ended ${state}`);
      return Date.parse((JSON.parse(data) as { updatedAt: string }).updatedAt) - submittedAt;
    },
    async close() {
      await client.close();
      await roles.close(5_000);
    },
  };
}

async function main(): Promise<void> {
  const options = parseCli(process.argv.slice(2));
  const workDir = mkdtempSync(join(tmpdir(), 'orq-compare-'));
  const checkouts: Checkout[] = [];
  const contenders: Contender[] = [];
  const redis = await startBenchRedis();
  let raw: RawPipeline | undefined;
  // Every round trip of each side, on whichever connection (both builds share this ioredis).
  const every = countEveryConnection([redis.admin]);
  // Interrupted (Ctrl-C): no worktree, build or private redis-server is left behind.
  const removeCheckouts = () => {
    for (const c of checkouts.splice(0)) c.remove();
    rmSync(workDir, { recursive: true, force: true });
  };
  const onSignal = () => {
    removeCheckouts();
    void redis.stop().finally(() => process.exit(130));
  };
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  try {
    const base = checkout(options.base, join(workDir, 'base'));
    checkouts.push(base);
    let changeDir = repoRoot;
    let changeLabel = 'the working tree';
    if (options.change) {
      const change = checkout(options.change, join(workDir, 'change'));
      checkouts.push(change);
      changeDir = change.dir;
      changeLabel = change.label;
    } else {
      build(changeLabel, repoRoot);
    }
    const scenarioPath = writePlanScenario(workDir, 'compare', independentTasks(options.tasks));
    // Each kept as soon as it runs, so a failure to start the other still closes it.
    const start = async (label: string, dir: string, prefix: string) => {
      const contender = await startContender(
        label,
        await loadBuild(dir),
        redis.url,
        prefix,
        redis.admin,
        scenarioPath,
      );
      contenders.push(contender);
      return contender;
    };
    const sides: Record<Side, Contender> = {
      base: await start(base.label, base.dir, 'cmp-base'),
      change: await start(changeLabel, changeDir, 'cmp-change'),
    };
    raw = await RawPipeline.startLike(redis.url, 'cmp-raw', benchConfig('cmp-raw'));

    // One session per side on its empty prefix first: what its finished tasks cost in Redis,
    // session state and jobs as retention keeps them (deterministic, unlike the timings).
    const bytes = { base: 0, change: 0, baseJobs: 0, changeJobs: 0 };
    for (const side of ['base', 'change'] as const) {
      await sides[side].runSession();
      const held = await prefixBytes(redis.admin, side === 'base' ? 'cmp-base' : 'cmp-change');
      bytes[side] = (held.jobs + held.state) / options.tasks;
      bytes[side === 'base' ? 'baseJobs' : 'changeJobs'] = held.jobs / options.tasks;
    }
    log(`warm-up: ${options.warmup} session(s) of ${options.tasks} tasks per side`);
    for (let i = 0; i < options.warmup; i += 1) {
      for (const side of pairOrder(i)) await sides[side].runSession();
      await raw.run(options.tasks);
    }
    const ms: Record<Side, number[]> = { base: [], change: [] };
    const cpu: Record<Side, number[]> = { base: [], change: [] };
    const rawMs: number[] = [];
    const trips: Record<Side, CommandTally> = {
      base: new CommandTally(),
      change: new CommandTally(),
    };
    for (let round = 0; round < options.rounds; round += 1) {
      for (const side of pairOrder(round)) {
        const started = process.cpuUsage();
        every.into(trips[side]);
        ms[side].push(await sides[side].runSession());
        every.into(undefined);
        cpu[side].push(cpuMsSince(started));
      }
      rawMs.push((await raw.run(options.tasks)).ms);
      log(
        `round ${round + 1}/${options.rounds}: base ${ms.base.at(-1)} ms, change ${ms.change.at(-1)} ms, raw BullMQ ${rawMs.at(-1)} ms`,
      );
    }

    const reporter = new Reporter();
    const context = {
      base: base.label,
      change: changeLabel,
      tasks: options.tasks,
      provider: 'builtin, scripted plan, zero latency',
    };
    reporter.record({
      name: 'compare.redis_bytes_per_finished_task',
      value: bytes.change / bytes.base,
      unit: 'ratio',
      note: "change ÷ base of the Redis bytes one session's finished tasks hold (state and retained jobs)",
      base_bytes_per_task: Math.round(bytes.base),
      change_bytes_per_task: Math.round(bytes.change),
      base_job_bytes_per_task: Math.round(bytes.baseJobs),
      change_job_bytes_per_task: Math.round(bytes.changeJobs),
      ...context,
    });
    // Raw BullMQ's hops/s over orq's in each round (the same 3 + 3N hops), per build.
    const overhead = (side: Side) => ms[side].map((m, i) => (rawMs[i] as number) / m);
    const spread = (ratios: number[]) => ({
      median: median(ratios),
      low: Math.min(...ratios),
      high: Math.max(...ratios),
    });
    const base_ = spread(overhead('base'));
    const change_ = spread(overhead('change'));
    // Paired as the session times are: round i's change ratio over its base ratio.
    const paired = overhead('change').map((c, i) => c / (overhead('base')[i] as number));
    reporter.record({
      name: 'compare.overhead_ratio',
      value: median(paired),
      unit: 'ratio',
      note: "change ÷ base of overhead_ratio (raw BullMQ ms ÷ orq ms) in each round, median; above 1 the change raised it. Each build's own median and spread beside it",
      round_ratio_low: Math.min(...paired),
      round_ratio_high: Math.max(...paired),
      base_overhead_ratio: base_.median,
      base_round_low: base_.low,
      base_round_high: base_.high,
      change_overhead_ratio: change_.median,
      change_round_low: change_.low,
      change_round_high: change_.high,
      raw_median_ms: median(rawMs),
      rounds: options.rounds,
      ...context,
    });
    const perTask = (tally: CommandTally) => {
      const counts = Object.entries(tally.take()).sort((a, b) => b[1] - a[1]);
      const per = options.rounds * options.tasks;
      return {
        total: counts.reduce((sum, [, n]) => sum + n, 0) / per,
        byCommand: Object.fromEntries(counts.map(([name, n]) => [name, n / per])),
      };
    };
    const baseTrips = perTask(trips.base);
    const changeTrips = perTask(trips.change);
    reporter.record({
      name: 'compare.round_trips_per_task',
      value: changeTrips.total / baseTrips.total,
      unit: 'ratio',
      note: "change ÷ base of the commands every connection of a build sent per task (BullMQ's fetches, finishes and lock checks too)",
      base_per_task: baseTrips.total,
      change_per_task: changeTrips.total,
      base_by_command: baseTrips.byCommand,
      change_by_command: changeTrips.byCommand,
      ...context,
    });
    for (const [name, samples, unit] of [
      ['compare.session_ms', ms, 'ms'],
      ['compare.node_cpu_ms', cpu, 'ms of Node CPU'],
    ] as const) {
      const summary = pairedSummary(samples.base, samples.change);
      reporter.record({
        name,
        value: summary.ratio,
        unit: 'ratio',
        note: `change ÷ base per round, median; below 1 the change costs less (${unit} per session)`,
        round_ratio_low: summary.low,
        round_ratio_high: summary.high,
        base_median: summary.baseMedian,
        change_median: summary.changeMedian,
        rounds: summary.rounds,
        ...context,
      });
    }
  } finally {
    every.restore();
    await raw?.close().catch(() => undefined);
    for (const contender of contenders) await contender.close().catch(() => undefined);
    await redis.stop();
    removeCheckouts();
  }
}

main().then(
  () => process.exit(0),
  (error: unknown) => {
    process.stderr.write(
      `bench:compare: ${error instanceof Error ? error.message : String(error)}\n`,
    );
    process.exit(1);
  },
);
