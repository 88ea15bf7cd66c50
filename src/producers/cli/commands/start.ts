import { Option, type Command } from 'commander';
import {
  configOption,
  parseConcurrency,
  parseIntIn,
  parseLatency,
  parseMilliseconds,
} from '../options.js';
import type { StartOptions } from './start-pod.js';

/** `orq start`: the consumers of a pod, until SIGTERM/SIGINT (then a bounded graceful close). */
export function registerStartCommand(program: Command): void {
  program
    .command('start')
    .description('Run role consumers against a shared Redis (one pod)')
    .option(
      '--roles <list>',
      'comma-separated roles: planner,judge,worker,replanner,coordinator',
      'planner,judge,worker,replanner,coordinator',
    )
    .option(
      '--concurrency <n>',
      'jobs per role in parallel (default: config.concurrency)',
      parseConcurrency,
    )
    .option(
      '--shutdown-timeout <ms>',
      'time active jobs get to finish on SIGTERM',
      parseMilliseconds,
      30_000,
    )
    .option(...configOption)
    .option(
      '--metrics-port <n>',
      'serve Prometheus metrics (job durations per role, HTTP requests of model calls) at /metrics on this port, and the probes /healthz and /readyz',
      parseIntIn(1, 65_535),
    )
    .option('--metrics-host <host>', 'address of the metrics and probes listener', '0.0.0.0')
    .addOption(
      new Option('--latency <ms>', 'simulated builtin model latency (benchmarks)')
        .argParser(parseLatency)
        .hideHelp(),
    )
    .action(async (options: StartOptions) => (await import('./start-pod.js')).startPod(options));
}
