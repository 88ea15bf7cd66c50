import {
  DelayedError,
  UnrecoverableError,
  WaitingError,
  Worker,
  type Job,
  type Processor,
} from 'bullmq';
import type { OrqConfig } from '../shared/config/schema.js';
import { MustWaitError, OrqError, parseOrThrow, ValidationError } from '../shared/errors.js';
import { ConnectionOption } from '../shared/connection-option.js';
import { LoggerOption, type Logger } from '../shared/logger.js';
import { flushOutbox, QueueSet } from '../shared/queue-set.js';
import { z, type ZodType } from 'zod';
import {
  defaultJobOptions,
  jobIds,
  JobFailedEvent,
  jobKind,
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
import type { Attributes } from '@opentelemetry/api';
import { inSpan, SpanKind } from '../shared/tracing/trace.js';
import { muteBullmqEvictionWarnings } from '../shared/bullmq-warnings.js';
import { routeProviderWarnings } from './llm/provider-warnings.js';
import { keyVariables, takeProviderKeys } from '../shared/config/provider-keys.js';
import { SessionStore } from '../shared/store/session-store.js';
import { JudgeNoiseStore } from '../shared/store/judge-noise-store.js';
import { UsageStore } from '../shared/store/usage-store.js';
import { QuotaStore } from '../shared/store/quota-store.js';
import { ProviderQuotas, QuotaWaitError } from './llm/quota.js';
import { QuotaWaits } from '../shared/store/quota-waits.js';
import { TenantSlots } from '../shared/store/tenant-slots.js';
import { withTenantCap } from './tenant-cap.js';
import { runAsQuotaCaller } from './llm/quota-caller.js';
import { leaveQuotaLines, quotaCallerOf } from './quota-line-jobs.js';
import { createCoordinatorProcessor } from './coordinator/coordinator.js';
import { createWebhookProcessor } from './coordinator/webhook.js';
import { startOutboxSweeper } from './coordinator/outbox-sweeper.js';
import { startRetentionSweeper } from './coordinator/retention-sweeper.js';
import { ModelResolver } from './models.js';
import type { RoleContext } from './roles/context.js';
import { createJudgeProcessor } from './roles/judge.js';
import { createPlannerProcessor } from './roles/planner.js';
import { createReplannerProcessor } from './roles/replanner.js';
import { createWorkerProcessor } from './roles/worker.js';
import type { AgentModelFactory } from './executors/agent/executor.js';
import { createExecutorRegistry } from './executors/registry.js';
import { createIntegrationProcessor } from './integration/processor.js';
import { followSessionEnds } from './session-ends.js';
import type { RoleModels } from './llm/types.js';
import { isPermanentCallFailure } from './llm/chat.js';
import type { RoleMetrics } from './metrics.js';
import { podHealth, type PodHealth } from './pod-health.js';
import { DeliveryLostError, deliveryStarted, isDeliveryLost, LOCK_LOST } from './delivery.js';

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
  /** The agent executor's model for every session instead of the session's (tests, embedding). */
  agentModel?: AgentModelFactory;
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
  agentModel: z.unknown().optional(),
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
  const kind = jobKind(name);
  return Object.hasOwn(schemas, kind) ? schemas[kind] : undefined;
}

/**
 * Coordinator events that move a session on: if one is lost for good, its session would wait
 * for it for ever, so its final failure is reported like a role job's (the task it was about
 * is blocked, or the planning attempt failed). A person's answer and a wait's timeout are too:
 * the history says the answer was not applied and the wait is still open. Cancel, resume and
 * job-failed events are not: their callers see the outcome, and a failure report must not
 * cause another.
 */
const REPORTED_COORDINATOR_EVENTS: ReadonlySet<string> = new Set([
  'plan-judged',
  'task-checked',
  'task-judged',
  'task-replanned',
  'integrated',
  'result-judged',
  'published',
  'answer',
  'wait-timed-out',
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
  const data = (job.data ?? {}) as {
    sessionId?: unknown;
    taskId?: unknown;
    attempt?: unknown;
    waitId?: unknown;
  };
  const attempt = JobFailedEvent.shape.attempt.safeParse(data.attempt);
  const waitId =
    role === 'coordinator' ? JobFailedEvent.shape.waitId.safeParse(data.waitId).data : undefined;
  const taskId =
    role === 'planner' || jobKind(job.name) === 'judge-plan' || job.name === 'plan-judged'
      ? undefined
      : JobFailedEvent.shape.taskId.safeParse(data.taskId).data;
  const event = JobFailedEvent.safeParse({
    sessionId: data.sessionId,
    role,
    jobId: job.id,
    error: message,
    ...(attempt.success && attempt.data !== undefined ? { attempt: attempt.data } : {}),
    ...(taskId !== undefined ? { taskId } : {}),
    ...(waitId !== undefined ? { waitId } : {}),
    ...(error instanceof OrqError ? { code: error.code } : {}),
    ...(malformed ? { malformed: true } : {}),
  });
  return event.success ? event.data : undefined;
}

/** One queue's jobs to the processor of their kind (jobKind), the rest to `otherwise`. */
function byJobKind(kinds: Record<string, Processor>, otherwise: Processor): Processor {
  return (job, token, signal) => {
    const kind = jobKind(job.name);
    const processor = Object.hasOwn(kinds, kind) ? (kinds[kind] as Processor) : otherwise;
    return processor(job, token, signal);
  };
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
  quotas: ProviderQuotas,
  metrics?: RoleMetrics,
): Processor {
  const run = async (job: Job, token?: string, signal?: AbortSignal) => {
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
    const caller = quotaCallerOf(role, job);
    deliveryStarted(job);
    shutdown.active += 1;
    shutdown.running.set(job, token);
    try {
      // (The coordinator checks its events itself, recording bad ones in their session.)
      if (role !== 'coordinator' && !jobSchema(role, job.name)) {
        throw new ValidationError(`${role} job`, [
          { path: '(name)', message: `unknown job name "${job.name}"` },
        ]);
      }
      // Its model calls wait for a provider's quota in its fair place (quota-line.ts).
      const result: unknown =
        role === 'coordinator'
          ? await processor(job, token, signal)
          : await runAsQuotaCaller(caller, () => processor(job, token, signal));
      // Handed back by close() while it ran: the job is not this delivery's to complete.
      if (shutdown.handBacks.has(job)) throw new WaitingError();
      await leaveQuotaLines(quotas, job, caller, log());
      if (ctx.logger.isLevelEnabled('debug')) {
        log().debug({ ms: Date.now() - started, result }, 'job done');
      }
      metrics?.observeJob(role, 'completed', (Date.now() - started) / 1000);
      return result;
    } catch (error) {
      if (error instanceof WaitingError) throw error;
      // Its lock lapsed and the job may run elsewhere by now: that delivery takes it from here,
      // so this one reports nothing (a job-failed event would block a task that still runs).
      if (isDeliveryLost(error, signal)) {
        log().warn({ attemptsStarted: job.attemptsStarted }, 'job stopped: it lost its lock');
        throw error instanceof DeliveryLostError
          ? error
          : new DeliveryLostError(ROLE_QUEUE[role], job.id);
      }
      // Cancelled by close() past its timeout: not a failure of the job. Hand it back to its
      // queue without spending an attempt, so another pod takes it now, not when its lock lapses.
      if ((signal?.aborted && shutdown.abandoning) || shutdown.handBacks.has(job)) {
        await handBackOnShutdown(job, token, shutdown, log());
        throw new WaitingError();
      }
      if (error instanceof MustWaitError && token) {
        const retryAt = await handBackToWait(role, job, token, error);
        log().info({ ...error.details, waitMs: error.waitMs }, error.message);
        if (error instanceof QuotaWaitError) await noteQuotaWait(ctx, job, retryAt, log());
        throw new DelayedError();
      }
      metrics?.observeJob(role, 'failed', (Date.now() - started) / 1000);
      await leaveQuotaLines(quotas, job, caller, log());
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
      shutdown.running.delete(job);
    }
  };
  // The whole job in its span: a job-failed event it sends joins the session's trace too.
  const wrapped = (job: Job, token?: string, signal?: AbortSignal) =>
    inJobSpan(role, job, () => run(job, token, signal));
  // BullMQ gives a job an abort signal (Worker.cancelAllJobs on shutdown) only when its processor
  // declares a third parameter, and builds an AbortController per job for it. Model calls need
  // it; the coordinator's transitions make none and are short, so it declares two.
  return role === 'coordinator' ? (job: Job, token?: string) => wrapped(job, token) : wrapped;
}

/**
 * A job's processing as a span, child of the span that enqueued it (the job's `traceparent`), so
 * a session is one trace across its queues and pods; DelayedError and WaitingError (the job is
 * handed back to wait) are not failures.
 */
function inJobSpan<T>(role: Role, job: Job, process: () => Promise<T>): Promise<T> {
  const data = (job.data ?? {}) as { sessionId?: unknown; taskId?: unknown; traceparent?: unknown };
  const sessionId = typeof data.sessionId === 'string' ? data.sessionId : undefined;
  const attributes: Attributes = {
    'orq.role': role,
    'messaging.system': 'bullmq',
    'messaging.operation.type': 'process',
    'messaging.destination.name': ROLE_QUEUE[role],
    'messaging.message.id': job.id ?? '',
    'orq.job.attempt': job.attemptsMade,
  };
  if (sessionId) attributes['orq.session.id'] = sessionId;
  if (typeof data.taskId === 'string') attributes['orq.task.id'] = data.taskId;
  // The planner's job is the session's plan operation (its model calls are children of it).
  if (role === 'planner') attributes['gen_ai.operation.name'] = 'plan';
  return inSpan(
    // The job's kind, not its name: a task job's name carries its task's title, and a span
    // name should not vary with every task.
    role === 'planner' ? `plan ${sessionId ?? ''}`.trim() : `${role} ${jobKind(job.name)}`,
    { kind: SpanKind.CONSUMER, attributes, traceparent: data.traceparent, sessionId },
    process,
    (error) =>
      !(
        error instanceof DelayedError ||
        error instanceof WaitingError ||
        error instanceof MustWaitError
      ),
  );
}

/**
 * A job that must wait (its provider's quota, its tenant's cap: issue 33) goes back to its queue
 * as delayed until it may run, with what it waits for as its progress. Delayed rather than
 * `worker.rateLimit()`: that stops the whole queue for every worker, and one work or judge queue
 * serves sessions of many providers and tenants, most of them with room to spare. Moving it
 * releases its lock, and BullMQ counts no failed attempt for a job that throws DelayedError.
 * Returns when the job runs again.
 */
async function handBackToWait(
  role: Role,
  job: Job,
  token: string,
  error: MustWaitError,
): Promise<number> {
  const { activity } = error;
  const at = new Date().toISOString();
  const { attempt } = (job.data ?? {}) as { attempt?: unknown };
  // A work job's progress is a TaskProgress (orq status shows it); the others' is only shown
  // by Bull Board.
  const progress =
    role === 'worker' && typeof attempt === 'number'
      ? { attempt, at, activity }
      : { at, activity, ...error.details };
  await job.updateProgress(progress).catch(() => undefined);
  const retryAt = error.retryAt();
  await job.moveToDelayed(retryAt, token);
  return retryAt;
}

/**
 * Counts a job handed back for quota against its session's tenant, for the tenant view (work
 * jobs carry their tenant; for the others, one read of the session). Only what people see
 * depends on it: a failure is logged, and the job waits all the same.
 */
async function noteQuotaWait(
  ctx: RoleContext,
  job: Job,
  retryAt: number,
  logger: Logger,
): Promise<void> {
  const { sessionId, tenant } = (job.data ?? {}) as { sessionId?: unknown; tenant?: unknown };
  if (typeof sessionId !== 'string' || !job.id) return;
  try {
    const owner =
      typeof tenant === 'string'
        ? tenant
        : (await ctx.store.loadSession(sessionId))?.session.tenant;
    if (owner === undefined) return;
    await new QuotaWaits(ctx.store.redis, ctx.store.prefix).note(
      { tenant: owner, sessionId, jobId: job.id },
      retryAt,
    );
  } catch (cause) {
    logger.debug({ err: (cause as Error).message }, 'quota wait not counted for its tenant');
  }
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
  /** The running jobs with their lock tokens: what close() hands back itself. */
  running: Map<Job, string | undefined>;
  /** Each job handed back on shutdown, once (by its processor or by close): whether it went. */
  handBacks: Map<Job, Promise<boolean>>;
}

/**
 * Moves a job cancelled by close() back to its queue, once, whoever asks first (its processor
 * reacting to the abort, or close() for one that has not reacted within the grace), while the
 * connection is still open. Says whether it went: one that could not be moved comes back only
 * when its lock lapses, counted as a stall.
 */
function handBackOnShutdown(
  job: Job,
  token: string | undefined,
  shutdown: ShutdownState,
  log: Logger,
): Promise<boolean> {
  let handBack = shutdown.handBacks.get(job);
  if (!handBack) {
    handBack = job.moveToWait(token).then(
      () => {
        log.warn('job handed back to its queue on shutdown');
        return true;
      },
      (error: unknown) => {
        log.warn(
          { err: (error as Error).message },
          'could not hand the job back to its queue on shutdown; it is redelivered when its lock lapses',
        );
        return false;
      },
    );
    shutdown.handBacks.set(job, handBack);
  }
  return handBack;
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
  // Before any job runs: no program a task starts inherits a provider key (issue 41).
  takeProviderKeys(keyVariables(config));
  const redis = createConnection(options.connection, 'consumer', logger);
  try {
    await refuseUnfitServer(redis, addressSetting);
  } catch (error) {
    redis.disconnect();
    throw error;
  }
  // BullMQ's own warning, once per connection, is muted only where orq's check could tell.
  if (await checkEvictionPolicy(redis, logger)) muteBullmqEvictionWarnings();
  // Warnings about model calls (an SDK's deprecated model, a prompt cut) go to the log, once each.
  routeProviderWarnings(logger);
  const store = new SessionStore(redis, config.redis.prefix, config.queues.historyMaxLength);
  const queues = new QueueSet(
    redis,
    config.redis.prefix,
    defaultJobOptions(config.queues),
    config.queues.taskJobNames,
    config.tenants.weights,
  );
  const quotas = new ProviderQuotas(new QuotaStore(redis, config.redis.prefix), {
    ...(options.metrics ? { events: options.metrics } : {}),
    weights: config.tenants.weights,
  });
  const models = new ModelResolver({
    ...(options.latencyMs !== undefined ? { latencyMs: options.latencyMs } : {}),
    ...(options.models ? { override: options.models } : {}),
    ...(options.cancelPollMs !== undefined ? { cancelPollMs: options.cancelPollMs } : {}),
    usageStore: new UsageStore(redis, config.redis.prefix),
    judgeNoise: new JudgeNoiseStore(redis, config.redis.prefix),
    quotas,
    ...(options.metrics ? { httpAttempts: options.metrics, modelCalls: options.metrics } : {}),
    // Real-model calls of a session cancelled meanwhile are aborted (issue 4).
    sessionState: async (sessionId) => (await store.loadSession(sessionId))?.session.state,
    logger,
  });
  const ctx: RoleContext = {
    store,
    queues,
    models,
    logger,
    lockDurationMs: config.queues.lockDurationMs,
  };
  const coordinatorCtx = {
    store,
    queues,
    logger: logger.child({ role: 'coordinator' }),
    ...(options.metrics ? { metrics: options.metrics } : {}),
  };

  const coordinatorEvents = createCoordinatorProcessor(coordinatorCtx);
  const processors: Record<Role, Processor> = {
    planner: createPlannerProcessor(ctx),
    judge: createJudgeProcessor(ctx),
    // Tenant caps hold back task executions only: planning, judging, replanning and a
    // session's integration (its last step, its tasks' slots free already) are never capped.
    worker: byJobKind(
      { integrate: createIntegrationProcessor(ctx) },
      withTenantCap(
        createWorkerProcessor(
          ctx,
          createExecutorRegistry(options.agentModel ? { agentModel: options.agentModel } : {}),
        ),
        new TenantSlots(redis, config.redis.prefix),
        config.tenants,
        config.queues.lockDurationMs,
        logger,
      ),
    ),
    replanner: createReplannerProcessor(ctx),
    coordinator: byJobKind(
      {
        notify: createWebhookProcessor(
          config.notifications.webhook,
          queues,
          logger.child({ role: 'coordinator' }),
          coordinatorEvents,
        ),
      },
      coordinatorEvents,
    ),
  };

  const shutdown: ShutdownState = {
    abandoning: false,
    active: 0,
    running: new Map(),
    handBacks: new Map(),
  };
  const connections: RedisConnection[] = [redis];
  const workers = options.roles.map((role) => {
    // One outage log per role: its connection and the blocking one BullMQ makes from it.
    const outage = new OutageLog(logger.child({ role, kind: 'consumer' }));
    const connection = createConnection(options.connection, 'consumer', logger, outage);
    connections.push(connection);
    const worker = new Worker(
      ROLE_QUEUE[role],
      wrapProcessor(role, processors[role], ctx, shutdown, quotas, options.metrics),
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
    // A renewal that failed (the process was paused or cut off past the lock): the job may be
    // another pod's by now, so its processor here is aborted; executors stop on the signal.
    // Coordinator events have no signal (wrapProcessor), and need none: their apply is atomic.
    worker.on('lockRenewalFailed', (jobIds) => {
      for (const jobId of jobIds) {
        logger.warn({ role, jobId }, 'job lost its lock: stopping it here');
        worker.cancelJob(jobId, LOCK_LOST);
      }
    });
    return worker;
  });
  await Promise.all(workers.map((w) => w.waitUntilReady()));
  // Pods that make model calls stop a session's calls as soon as its end is announced.
  const stopFollowing = options.roles.some((role) => role !== 'coordinator')
    ? await followSessionEnds(
        redis,
        config.redis.prefix,
        ({ sessionId, state }) => {
          models.sessionEnded(sessionId, state);
          // Every such pod does it; it is idempotent and cheap (once per session end).
          quotas.sessionEnded(sessionId).catch((error: unknown) => {
            logger.debug(
              { sessionId, err: (error as Error).message },
              'quota lines not left; the places lapse with their leases',
            );
          });
        },
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
        // Those that have not reacted yet are handed back here, before the connections close:
        // their own hand-back, later, would find no connection, and the job would come back only
        // when its lock lapsed, counted as a stall. Bounded: with Redis gone the moves wait for
        // ever, until the disconnect below fails them.
        await settlesWithin(
          Promise.all(
            [...shutdown.running].map(([job, token]) =>
              handBackOnShutdown(
                job,
                token,
                shutdown,
                logger.child({ jobId: job.id, queue: job.queueName }),
              ),
            ),
          ),
          ABANDON_GRACE_MS,
        );
      }
      stopFollowing();
      await queues.close();
      for (const c of connections) c.disconnect();
    },
  };
}

export { flushOutbox };
