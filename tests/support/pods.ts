import type { ChildProcess } from 'node:child_process';
import { Queue } from 'bullmq';
import type { RedisConnection } from '../../src/shared/redis.js';
import { bullPrefix, type QueueName } from '../../src/shared/queues.js';
import { spawnOrq, stopProcess, waitForOutput } from './cli.js';

/**
 * `orq start` pods as real processes for the reliability tests, with the environment every pod
 * of one test shares (Redis URL, prefix, lock timings). Every pod started is stopped by
 * `stopAll`, by SIGKILL when asked (a test that already killed some does not wait on them).
 */
export class Pods {
  readonly children: ChildProcess[] = [];

  constructor(private readonly env: Record<string, string>) {}

  /** Spawns `orq start --roles ROLES ...args` and resolves once it logs 'roles started'. */
  async start(
    roles: string,
    args: string[] = [],
    env: Record<string, string> = {},
  ): Promise<ChildProcess> {
    const child = spawnOrq(['start', '--roles', roles, ...args], {
      env: { ORQ_LOG_LEVEL: 'info', ...this.env, ...env },
    });
    this.children.push(child);
    await waitForOutput(child, 'roles started', 60_000);
    return child;
  }

  async stopAll(signal: NodeJS.Signals = 'SIGKILL'): Promise<void> {
    const alive = this.children.splice(0).filter((c) => c.exitCode === null && !c.signalCode);
    await Promise.all(alive.map((c) => stopProcess(c, signal)));
  }
}

/** Resolves with the exit code (or signal name) once the child has exited. */
export function exited(child: ChildProcess): Promise<number | string> {
  if (child.exitCode !== null) return Promise.resolve(child.exitCode);
  if (child.signalCode !== null) return Promise.resolve(child.signalCode);
  return new Promise((resolve) =>
    child.once('exit', (code, signal) => resolve(code ?? signal ?? -1)),
  );
}

/** Locks that expire quickly, so a killed process's jobs are redelivered within seconds. */
export const FAST_LOCKS = { lockDurationMs: 2_000, stalledIntervalMs: 1_000 };

/** Environment variables that set `queues.*` config keys of a spawned pod. */
export function queueEnv(values: Record<string, number>): Record<string, string> {
  return Object.fromEntries(
    Object.entries(values).map(([key, value]) => [`ORQ__queues__${key}`, String(value)]),
  );
}

/** A BullMQ Queue handle on one orq queue, to look at job states from a test. */
export function bullQueue(connection: RedisConnection, prefix: string, name: QueueName): Queue {
  return new Queue(name, { connection, prefix: bullPrefix(prefix) });
}
