import { UnrecoverableError, Worker, type Job, type Processor } from 'bullmq';
import type { Redis } from 'ioredis';
import type { OrqConfig } from '../shared/config/schema.js';
import { OrqError, ValidationError } from '../shared/errors.js';
import type { Logger } from '../shared/logger.js';
import { flushOutbox, QueueSet } from '../shared/queue-set.js';
import {
  bullPrefix,
  defaultJobOptions,
  jobIds,
  outboxJob,
  ROLE_QUEUE,
  type Role,
} from '../shared/queues.js';
import { checkEvictionPolicy, createConnection, type ConnectionInput } from '../shared/redis.js';
import { SessionStore } from '../shared/store/session-store.js';
import { createCoordinatorProcessor } from './coordinator/coordinator.js';
import { startOutboxSweeper } from './coordinator/outbox-sweeper.js';
import { ModelResolver } from './models.js';
import type { RoleContext } from './roles/context.js';
import { createJudgeProcessor } from './roles/judge.js';
import { createPlannerProcessor } from './roles/planner.js';
import { createReplannerProcessor } from './roles/replanner.js';
import { createWorkerProcessor } from './roles/worker.js';
import type { RoleModels } from '../shared/llm/types.js';

export interface StartRolesOptions {
  roles: readonly Role[];
  connection: ConnectionInput;
  config: OrqConfig;
  logger: Logger;
  /** Overrides config.concurrency for every role started here. */
  concurrency?: number;
  /** Simulated model latency of the builtin provider (benchmarks). */
  latencyMs?: number;
  /** How often a coordinator pod drains outboxes left behind by a crash (ms, default 30 s). */
  outboxSweepIntervalMs?: number;
  /** Use these models for every session instead of resolving from session config (tests). */
  models?: RoleModels;
}

export interface RunningRoles {
  workers: Worker[];
  store: SessionStore;
  queues: QueueSet;
  /** Stops taking jobs, lets active ones finish for up to `timeoutMs`, then closes connections. */
  close(timeoutMs?: number): Promise<void>;
}

function failureInfo(
  role: Role,
  job: Job,
): { sessionId: string; taskId?: string; attempt: number } | undefined {
  const data = job.data as { sessionId?: unknown; taskId?: unknown; attempt?: unknown } | undefined;
  if (!data || typeof data.sessionId !== 'string' || typeof data.attempt !== 'number')
    return undefined;
  const taskId = role === 'planner' || job.name === 'judge-plan' ? undefined : data.taskId;
  return {
    sessionId: data.sessionId,
    attempt: data.attempt,
    ...(typeof taskId === 'string' ? { taskId } : {}),
  };
}

/**
 * The same wrapper around every role: a child logger with the ids, and on the job's last try
 * (or an error no retry can fix) a `job-failed` event so the coordinator records the reason.
 */
function wrapProcessor(role: Role, processor: Processor, ctx: RoleContext): Processor {
  return async (job: Job) => {
    const data = job.data as { sessionId?: string; taskId?: string } | undefined;
    const log = ctx.logger.child({
      role,
      jobId: job.id,
      sessionId: data?.sessionId,
      taskId: data?.taskId,
    });
    const started = Date.now();
    try {
      const result: unknown = await processor(job);
      log.debug({ ms: Date.now() - started, result }, 'job done');
      return result;
    } catch (error) {
      const permanent = error instanceof ValidationError || error instanceof UnrecoverableError;
      const lastTry = job.attemptsMade + 1 >= (job.opts.attempts ?? 1);
      const message = error instanceof Error ? error.message : String(error);
      log.warn({ err: message, attemptsMade: job.attemptsMade, permanent, lastTry }, 'job failed');
      const info = role === 'coordinator' ? undefined : failureInfo(role, job);
      if ((permanent || lastTry) && info && job.id) {
        await ctx.queues.add(
          outboxJob('coordinator', 'job-failed', jobIds.jobFailed(job.id), {
            ...info,
            role,
            jobId: job.id,
            error: message,
            ...(error instanceof OrqError ? { code: error.code } : {}),
          }),
        );
      }
      if (permanent && !(error instanceof UnrecoverableError))
        throw new UnrecoverableError(message);
      throw error;
    }
  };
}

export async function startRoles(options: StartRolesOptions): Promise<RunningRoles> {
  const { config, logger } = options;
  const redis: Redis = createConnection(options.connection, 'consumer', logger);
  await checkEvictionPolicy(redis, logger);
  const store = new SessionStore(redis, config.redis.prefix, config.queues.historyMaxLength);
  const queues = new QueueSet(redis, config.redis.prefix, defaultJobOptions(config.queues));
  const models = new ModelResolver({
    ...(options.latencyMs !== undefined ? { latencyMs: options.latencyMs } : {}),
    ...(options.models ? { override: options.models } : {}),
  });
  const ctx: RoleContext = { store, queues, models, logger };
  const coordinatorCtx = { store, queues, logger: logger.child({ role: 'coordinator' }) };

  const processors: Record<Role, Processor> = {
    planner: createPlannerProcessor(ctx),
    judge: createJudgeProcessor(ctx),
    worker: createWorkerProcessor(ctx),
    replanner: createReplannerProcessor(ctx),
    coordinator: createCoordinatorProcessor(coordinatorCtx),
  };

  const connections: Redis[] = [redis];
  const workers = options.roles.map((role) => {
    const connection = createConnection(options.connection, 'consumer', logger);
    connections.push(connection);
    const worker = new Worker(ROLE_QUEUE[role], wrapProcessor(role, processors[role], ctx), {
      connection,
      prefix: bullPrefix(config.redis.prefix),
      concurrency: options.concurrency ?? config.concurrency[role],
      lockDuration: config.queues.lockDurationMs,
      stalledInterval: config.queues.stalledIntervalMs,
      maxStalledCount: 3,
    });
    worker.on('error', (error) => logger.error({ role, err: error.message }, 'worker error'));
    return worker;
  });
  await Promise.all(workers.map((w) => w.waitUntilReady()));
  const stopSweeper = options.roles.includes('coordinator')
    ? startOutboxSweeper(store, queues, logger, options.outboxSweepIntervalMs ?? 30_000)
    : () => undefined;
  logger.info({ roles: options.roles, prefix: config.redis.prefix }, 'roles started');

  return {
    workers,
    store,
    queues,
    async close(timeoutMs = 30_000) {
      stopSweeper();
      const graceful = Promise.all(workers.map((w) => w.close()));
      const timedOut = await Promise.race([
        graceful.then(() => false),
        new Promise<boolean>((r) => setTimeout(() => r(true), timeoutMs).unref()),
      ]);
      if (timedOut) {
        logger.warn({ timeoutMs }, 'active jobs did not finish in time; they will be redelivered');
        await Promise.all(workers.map((w) => w.close(true)));
      }
      await queues.close();
      for (const c of connections) c.disconnect();
    },
  };
}

export { flushOutbox };
