import { UnrecoverableError, WaitingError, Worker, type Job, type Processor } from 'bullmq';
import type { OrqConfig } from '../shared/config/schema.js';
import { OrqError, parseOrThrow, ValidationError } from '../shared/errors.js';
import { ConnectionOption } from '../shared/connection-option.js';
import { LoggerOption, type Logger } from '../shared/logger.js';
import { flushOutbox, QueueSet } from '../shared/queue-set.js';
import { z, type ZodType } from 'zod';
import {
  defaultJobOptions,
  jobIds,
  JobFailedEvent,
  JobSchemas,
  outboxJob,
  queuePrefix,
  Role,
  ROLE_QUEUE,
} from '../shared/queues.js';
import {
  type AddressSetting,
  checkEvictionPolicy,
  createConnection,
  isTransportError,
  OutageLog,
  pingRedis,
  refuseUnfitServer,
  type ConnectionInput,
  type RedisConnection,
} from '../shared/redis.js';
import { settlesWithin } from '../shared/settles-within.js';
import { muteBullmqEvictionWarnings } from '../shared/bullmq-warnings.js';
import { SessionStore } from '../shared/store/session-store.js';
import { UsageStore } from '../shared/store/usage-store.js';
import { createCoordinatorProcessor } from './coordinator/coordinator.js';
import { startOutboxSweeper } from './coordinator/outbox-sweeper.js';
import { startRetentionSweeper } from './coordinator/retention-sweeper.js';
import { ModelResolver } from './models.js';
import type { RoleContext } from './roles/context.js';
import { createJudgeProcessor } from './roles/judge.js';
import { createPlannerProcessor } from './roles/planner.js';
import { createReplannerProcessor } from './roles/replanner.js';
import { createWorkerProcessor } from './roles/worker.js';
import { followSessionEnds } from './session-ends.js';
import type { RoleModels } from '../shared/llm/types.js';
import { isPermanentCallFailure } from '../shared/llm/chat.js';
import type { RoleMetrics } from './metrics.js';
import { podHealth, type PodHealth } from './pod-health.js';

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
  /** How often a session with model calls in flight is read, in case its end was missed (tests). */
  cancelPollMs?: number;
  /** Use these models for every session instead of resolving from session config (tests). */
  models?: RoleModels;
  /** Job durations per role are observed here (`orq start --metrics-port`). */
  metrics?: RoleMetrics;
}

/**
 * The keys startRoles takes, checked before anything connects: an unknown one (`concurency`)
 * was ignored, and the pod ran with what it did not ask for. The config is a parsed OrqConfig
 * (parseConfig or loadConfig), the rest is typed.
 */
const RolesOptions = z.strictObject({
  roles: z.array(Role),
  connection: ConnectionOption,
  config: z.looseObject({}),
  logger: LoggerOption,
  concurrency: z.unknown().optional(),
  latencyMs: z.unknown().optional(),
  outboxSweepIntervalMs: z.unknown().optional(),
  cancelPollMs: z.unknown().optional(),
  models: z.unknown().optional(),
  metrics: z.unknown().optional(),
} satisfies Record<keyof StartRolesOptions, z.ZodType>);

export interface RunningRoles {
  workers: Worker[];
  store: SessionStore;
  queues: QueueSet;
  /** Whether the pod can take jobs, and if not why (its /readyz). */
  health(): Promise<PodHealth>;
  /** Stops taking jobs, lets active ones finish for up to `timeoutMs`, then closes connections. */
  close(timeoutMs?: number): Promise<void>;
}

/** The payload schema of a role's job by name; undefined for a name the queue does not have. */
function jobSchema(role: Role, name: string): ZodType | undefined {
  const schemas = JobSchemas[ROLE_QUEUE[role]] as Record<string, ZodType>;
  return Object.hasOwn(schemas, name) ? schemas[name] : undefined;
}

/**
 * Coordinator events that move a session on: if one is lost for good, its session would wait
 * for it for ever, so its final failure is reported like a role job's (the task it was about
 * is blocked, or the planning attempt failed). Cancel, resume and job-failed events are not:
 * their callers see the outcome, and a failure report must not cause another.
 */
const REPORTED_COORDINATOR_EVENTS: ReadonlySet<string> = new Set([
  'plan-judged',
  'task-judged',
  'task-replanned',
]);

/**
 * The `job-failed` event for a job's final failure, when the job names a session: the
 * coordinator records it in that session's history. A role job whose payload does not match
 * its schema is flagged `malformed` (bad input, recorded but changing nothing); its attempt and
 * task id are passed on only where they are valid. A malformed coordinator event is recorded
 * by the coordinator itself (applyEvent), and an event for a session that does not exist has
 * nowhere to be recorded: neither is reported.
 */
function failureEvent(
  role: Role,
  job: Job,
  error: unknown,
  message: string,
): JobFailedEvent | undefined {
  if (!job.id) return undefined;
  const malformed = !jobSchema(role, job.name)?.safeParse(job.data).success;
  if (role === 'coordinator') {
    const unknownSession = error instanceof OrqError && error.code === 'NOT_FOUND';
    if (!REPORTED_COORDINATOR_EVENTS.has(job.name) || malformed || unknownSession) return undefined;
  }
  const data = (job.data ?? {}) as { sessionId?: unknown; taskId?: unknown; attempt?: unknown };
  const attempt = JobFailedEvent.shape.attempt.safeParse(data.attempt);
  const taskId =
    role === 'planner' || job.name === 'judge-plan' || job.name === 'plan-judged'
      ? undefined
      : JobFailedEvent.shape.taskId.safeParse(data.taskId).data;
  const event = JobFailedEvent.safeParse({
    sessionId: data.sessionId,
    role,
    jobId: job.id,
    error: message,
    ...(attempt.success && attempt.data !== undefined ? { attempt: attempt.data } : {}),
    ...(taskId !== undefined ? { taskId } : {}),
    ...(error instanceof OrqError ? { code: error.code } : {}),
    ...(malformed ? { malformed: true } : {}),
  });
  return event.success ? event.data : undefined;
}

/**
 * The same wrapper around every role: a child logger with the ids, and on the job's last try
 * (or an error no retry can fix) a `job-failed` event so the coordinator records the reason.
 */
function wrapProcessor(
  role: Role,
  processor: Processor,
  ctx: RoleContext,
  shutdown: ShutdownState,
  metrics?: RoleMetrics,
): Processor {
  const wrapped = async (job: Job, token?: string, signal?: AbortSignal) => {
    const data = job.data as { sessionId?: string; taskId?: string } | undefined;
    // Built on the first line logged: most jobs log nothing at the default level.
    let child: Logger | undefined;
    const log = () =>
      (child ??= ctx.logger.child({
        role,
        jobId: job.id,
        sessionId: data?.sessionId,
        taskId: data?.taskId,
      }));
    const started = Date.now();
    shutdown.active += 1;
    try {
      // (The coordinator checks its events itself, recording bad ones in their session.)
      if (role !== 'coordinator' && !jobSchema(role, job.name)) {
        throw new ValidationError(`${role} job`, [
          { path: '(name)', message: `unknown job name "${job.name}"` },
        ]);
      }
      const result: unknown = await processor(job, token, signal);
      if (ctx.logger.isLevelEnabled('debug')) {
        log().debug({ ms: Date.now() - started, result }, 'job done');
      }
      metrics?.observeJob(role, 'completed', (Date.now() - started) / 1000);
      return result;
    } catch (error) {
      // Cancelled by close() past its timeout: not a failure of the job. Hand it back to its
      // queue without spending an attempt, so another pod takes it now, not when its lock lapses.
      if (signal?.aborted && shutdown.abandoning) {
        log().warn('job handed back to its queue on shutdown');
        await job.moveToWait(token).catch(() => undefined);
        throw new WaitingError();
      }
      metrics?.observeJob(role, 'failed', (Date.now() - started) / 1000);
      // A budget refusal is final too: a retry would be refused again (the refusal is sticky).
      const permanent =
        error instanceof ValidationError ||
        error instanceof UnrecoverableError ||
        // A session that does not exist never will: retrying an event for it only delays the failure.
        (error instanceof OrqError &&
          (error.code === 'BUDGET_EXHAUSTED' || error.code === 'NOT_FOUND')) ||
        // A refused model or request, a reply cut off: the same again on any pod.
        isPermanentCallFailure(error);
      const lastTry = job.attemptsMade + 1 >= (job.opts.attempts ?? 1);
      const message = error instanceof Error ? error.message : String(error);
      log().warn(
        { err: message, attemptsMade: job.attemptsMade, permanent, lastTry },
        'job failed',
      );
      const failed = permanent || lastTry ? failureEvent(role, job, error, message) : undefined;
      if (failed && job.id) {
        await ctx.queues.add(
          outboxJob(
            'coordinator',
            'job-failed',
            jobIds.jobFailed(ROLE_QUEUE[role], job.id),
            failed,
          ),
        );
      }
      if (permanent && !(error instanceof UnrecoverableError))
        throw new UnrecoverableError(message);
      throw error;
    } finally {
      shutdown.active -= 1;
    }
  };
  // BullMQ gives a job an abort signal (Worker.cancelAllJobs on shutdown) only when its processor
  // declares a third parameter, and builds an AbortController per job for it. Model calls need
  // it; the coordinator's transitions make none and are short, so it declares two.
  return role === 'coordinator' ? (job: Job, token?: string) => wrapped(job, token) : wrapped;
}

/**
 * A job whose processes were killed more than maxStalledCount times is failed by BullMQ itself
 * (a deferred failure) without running the processor, so wrapProcessor never reports it: report
 * it here, or its session would wait for it for ever.
 */
async function reportDeferredFailure(
  role: Role,
  job: Job | undefined,
  error: Error,
  ctx: RoleContext,
): Promise<void> {
  if (!job?.deferredFailure || !job.id) return;
  const failed = failureEvent(role, job, error, error.message);
  ctx.logger.error({ role, jobId: job.id, err: error.message }, 'job failed by BullMQ');
  if (!failed) return;
  try {
    await ctx.queues.add(
      outboxJob('coordinator', 'job-failed', jobIds.jobFailed(ROLE_QUEUE[role], job.id), failed),
    );
  } catch (cause) {
    ctx.logger.error({ role, jobId: job.id, err: (cause as Error).message }, 'cannot report');
  }
}

interface ShutdownState {
  /** Set when close() gives up waiting: the active jobs are being cancelled, not failing. */
  abandoning: boolean;
  /** Jobs whose processors run now: what a graceful close waits for. */
  active: number;
}

/** How long cancelled jobs get to hand themselves back before the connections are closed. */
const ABANDON_GRACE_MS = 2_000;
/**
 * How long a pod with no active job waits for its consumers to close. With Redis up they close
 * at once; with Redis unreachable BullMQ's close never resolves (taskforcesh/bullmq#4656), and
 * an idle pod has nothing to wait for: it must not sit out the whole shutdown timeout.
 */
const IDLE_CLOSE_MS = 3_000;

/**
 * Starts the given roles as BullMQ consumers on one Redis. On a Redis whose eviction policy can
 * lose jobs it logs one warning and drops BullMQ's console.warn of the same (once per
 * connection) for the rest of the process: only that message (bullmq-warnings.ts).
 */
export function startRoles(options: StartRolesOptions): Promise<RunningRoles> {
  return launchRoles(options, 'connection');
}

/**
 * startRoles for orq's own commands: `addressSetting` says where their user set the Redis
 * address (REDIS_URL for the CLI), so a refusal's hint names that, not the option.
 */
export async function launchRoles(
  options: StartRolesOptions,
  addressSetting: AddressSetting,
): Promise<RunningRoles> {
  const { config, logger } = options;
  parseOrThrow(RolesOptions, options, 'startRoles options');
  const redis = createConnection(options.connection, 'consumer', logger);
  try {
    await refuseUnfitServer(redis, addressSetting);
  } catch (error) {
    redis.disconnect();
    throw error;
  }
  // BullMQ's own warning, once per connection, is muted only where orq's check could tell.
  if (await checkEvictionPolicy(redis, logger)) muteBullmqEvictionWarnings();
  const store = new SessionStore(redis, config.redis.prefix, config.queues.historyMaxLength);
  const queues = new QueueSet(redis, config.redis.prefix, defaultJobOptions(config.queues));
  const models = new ModelResolver({
    ...(options.latencyMs !== undefined ? { latencyMs: options.latencyMs } : {}),
    ...(options.models ? { override: options.models } : {}),
    ...(options.cancelPollMs !== undefined ? { cancelPollMs: options.cancelPollMs } : {}),
    usageStore: new UsageStore(redis, config.redis.prefix),
    // Real-model calls of a session cancelled meanwhile are aborted (issue 4).
    sessionState: async (sessionId) => (await store.loadSession(sessionId))?.session.state,
  });
  const ctx: RoleContext = { store, queues, models, logger };
  const coordinatorCtx = {
    store,
    queues,
    logger: logger.child({ role: 'coordinator' }),
    ...(options.metrics ? { metrics: options.metrics } : {}),
  };

  const processors: Record<Role, Processor> = {
    planner: createPlannerProcessor(ctx),
    judge: createJudgeProcessor(ctx),
    worker: createWorkerProcessor(ctx),
    replanner: createReplannerProcessor(ctx),
    coordinator: createCoordinatorProcessor(coordinatorCtx),
  };

  const shutdown: ShutdownState = { abandoning: false, active: 0 };
  const connections: RedisConnection[] = [redis];
  const workers = options.roles.map((role) => {
    // One outage log per role: its connection and the blocking one BullMQ makes from it.
    const outage = new OutageLog(logger.child({ role, kind: 'consumer' }));
    const connection = createConnection(options.connection, 'consumer', logger, outage);
    connections.push(connection);
    const worker = new Worker(
      ROLE_QUEUE[role],
      wrapProcessor(role, processors[role], ctx, shutdown, options.metrics),
      {
        connection,
        prefix: queuePrefix(config.redis.prefix, ROLE_QUEUE[role], redis),
        concurrency: options.concurrency ?? config.concurrency[role],
        lockDuration: config.queues.lockDurationMs,
        stalledInterval: config.queues.stalledIntervalMs,
        maxStalledCount: 3,
      },
    );
    worker.on('error', (error) => {
      if (isTransportError(error)) outage.error(error);
      else logger.error({ role, err: error.message }, 'worker error');
    });
    worker.on('failed', (job, error) => void reportDeferredFailure(role, job, error, ctx));
    return worker;
  });
  await Promise.all(workers.map((w) => w.waitUntilReady()));
  // Pods that make model calls stop a session's calls as soon as its end is announced.
  const stopFollowing = options.roles.some((role) => role !== 'coordinator')
    ? await followSessionEnds(
        redis,
        config.redis.prefix,
        ({ sessionId, state }) => models.sessionEnded(sessionId, state),
        logger,
      )
    : () => undefined;
  const stopSweeper = options.roles.includes('coordinator')
    ? startOutboxSweeper(store, queues, logger, options.outboxSweepIntervalMs ?? 30_000)
    : () => undefined;
  const { deleteFinishedAfterSeconds, sweepIntervalSeconds } = config.retention;
  const stopRetention =
    options.roles.includes('coordinator') && deleteFinishedAfterSeconds !== undefined
      ? startRetentionSweeper(store, logger, {
          maxIdleSeconds: deleteFinishedAfterSeconds,
          intervalMs: sweepIntervalSeconds * 1000,
        })
      : () => undefined;
  logger.info({ roles: options.roles, prefix: config.redis.prefix }, 'roles started');

  let closing = false;
  return {
    workers,
    store,
    queues,
    async health() {
      const consumers = workers.map((w, i) => ({
        role: options.roles[i] as Role,
        running: w.isRunning(),
      }));
      if (closing) return podHealth({ phase: 'stopping', consumers });
      return podHealth({ phase: 'running', redisUp: await pingRedis(redis), consumers });
    },
    async close(timeoutMs = 30_000) {
      closing = true;
      stopSweeper();
      stopRetention();
      const graceful = Promise.all(workers.map((w) => w.close()));
      const started = Date.now();
      let closed = await settlesWithin(
        graceful,
        shutdown.active === 0 ? Math.min(timeoutMs, IDLE_CLOSE_MS) : timeoutMs,
      );
      // A job taken just before the close began: it gets the rest of the timeout.
      if (!closed && shutdown.active > 0) {
        closed = await settlesWithin(graceful, timeoutMs - (Date.now() - started));
      }
      if (!closed && shutdown.active === 0) {
        logger.warn('the queue consumers did not close (is Redis unreachable?); stopping anyway');
      } else if (!closed) {
        logger.warn({ timeoutMs }, 'active jobs did not finish in time; handing them back');
        // Worker.close(true) after close() only returns the pending graceful close, so it cannot
        // bound the wait: abort the active jobs instead (their processors get the signal). One
        // that ignores it is left behind; its lock lapses and the job is redelivered.
        shutdown.abandoning = true;
        for (const w of workers) w.cancelAllJobs('shutdown timeout');
        await settlesWithin(graceful, ABANDON_GRACE_MS);
      }
      stopFollowing();
      await queues.close();
      for (const c of connections) c.disconnect();
    },
  };
}

export { flushOutbox };
