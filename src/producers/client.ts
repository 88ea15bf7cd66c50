import { inSpan, SpanKind, withTraceparent } from '../shared/tracing/trace.js';
import { randomUUID } from 'node:crypto';
import { inBand } from '../shared/fair-release.js';
import { z } from 'zod';
import { applyLegacyKeys, parseConfig, mergeConfig } from '../shared/config/load.js';
import { callerLimitIssues } from '../shared/config/caller-limits.js';
import { overridesOutside } from '../shared/config/override-policy.js';
import { unsubmittableSettings } from '../shared/config/unworkable.js';
import { submitDigest } from './submit-digest.js';
import { ConnectionOption } from '../shared/connection-option.js';
import { SessionConfig, type OrqConfig, type OrqConfigInput } from '../shared/config/schema.js';
import type { HistoryEntry } from '../shared/domain/history.js';
import type { BuiltinUse, SessionResult } from '../shared/domain/result.js';
import type { TaskProgress } from '../shared/domain/progress.js';
import {
  FINISHED_SESSION_STATES,
  REQUEST_SETTLED_STATES,
  RESUMABLE_SESSION_STATES,
  Session,
  SessionId,
  SessionState,
  SessionPriority,
  TenantId,
} from '../shared/domain/session.js';
import { isExecuting, TaskId, type Task } from '../shared/domain/task.js';
import type { PlanBreakdown } from '../shared/domain/plan.js';
import {
  WaitAnswer,
  WaitId,
  type QuestionWait,
  type StepApprovalWait,
  type WaitAnswerInput,
} from '../shared/domain/human-wait.js';
import { checkPlanEdit } from '../shared/rules/plan-edit.js';
import {
  describeZodIssues,
  OrqError,
  parseForPeople,
  parseOrThrow,
  ValidationError,
  WaitEndedError,
} from '../shared/errors.js';
import { flushOutbox, QueueSet } from '../shared/queue-set.js';
import { readRunningJobs } from '../shared/running-progress.js';
import {
  BudgetRaise,
  defaultJobOptions,
  isResumeEvent,
  jobIds,
  outboxJob,
  type OutboxJob,
  ResumeMode,
  Role,
  ROLE_QUEUE,
} from '../shared/queues.js';
import {
  asRedisUnavailable,
  blockingTwin,
  createConnection,
  ensureConnected,
  isTransportError,
  OutageLog,
  refuseUnfitServer,
  reportOutages,
  untilReady,
  type AddressSetting,
  type ConnectionInput,
  type RedisConnection,
} from '../shared/redis.js';
import { LoggerOption, type Logger } from '../shared/logger.js';
import {
  deriveSessionResult,
  resultIsFinal,
  resultNotFinal,
} from '../shared/rules/session-result.js';
import { extractRequiredTerms } from '../shared/rules/terms.js';
import { watchEnds, type WatchUntil } from '../shared/rules/watch-end.js';
import { integrationResumable } from '../shared/rules/integration-plan.js';
import {
  dropPendingRequests,
  markRequestPending,
  readSettling,
} from '../shared/store/pending-resumes.js';
import { unfinishedStates } from '../shared/rules/retention.js';
import {
  deleteSession,
  pruneSessions,
  type DeletedSession,
  type PruneReport,
} from '../shared/store/session-retention.js';
import { BUDGET_RESUME_HINT, leastReservation } from '../shared/budget.js';
import { MODEL_ROLES } from '../shared/config/roles.js';
import { builtinUse } from '../shared/config/builtin-roles.js';
import { UsageStore, type SessionUsage } from '../shared/store/usage-store.js';
import { QuotaStore } from '../shared/store/quota-store.js';
import type { QuotaView } from '../shared/domain/quota.js';
import { sessionNotFound } from '../shared/store/session-reads.js';
import type { Counters, StoredHistoryEntry } from '../shared/store/session-records.js';
import { SessionStore } from '../shared/store/session-store.js';
import { TaskViewCache } from '../shared/store/task-view-cache.js';
import { readTenantLoad, type TenantLoad } from '../shared/store/tenant-load.js';
import {
  formatCursor,
  ListCursorText,
  parseCursor,
  type ListCursor,
} from '../shared/store/session-index.js';
import { Instruction } from './instruction.js';
import { MAX_NESTING_DEPTH, nestsDeeperThan } from '../shared/nesting.js';

export const SubmitRequest = z.strictObject({
  instruction: Instruction,
  /** Per-session overrides of refinement, replanning, execution, planning, llm, budget and result settings. */
  config: z
    .record(z.string(), z.unknown())
    // Before anything walks it: merging a config nested 100,000 deep overflowed the stack.
    .refine((config) => !nestsDeeperThan(config, MAX_NESTING_DEPTH), {
      error: `nests deeper than ${MAX_NESTING_DEPTH} levels; no setting is that deep`,
      abort: true,
    })
    .optional(),
  /**
   * The same key twice gives the same session; with another instruction, config or metadata it
   * is refused (CONFLICT), since answering with the old session would drop what changed.
   */
  idempotencyKey: z
    .string()
    .min(1, { error: 'an idempotency key must not be empty', abort: true })
    .max(200)
    // " k" and "k" would be two keys to Redis and one to a person reading a log.
    .regex(/^\S(.*\S)?$/s, 'an idempotency key neither starts nor ends with a space')
    .optional(),
  metadata: z.record(z.string(), z.string()).optional(),
  /** Whose session this is: the workers are shared fairly among tenants (default `default`). */
  tenant: TenantId.optional(),
  /** 1 to 9, higher served first (default 5): every job of a higher one goes before a lower's. */
  priority: SessionPriority.optional(),
});
export type SubmitRequest = z.input<typeof SubmitRequest>;

export const ResumeRequest = z.strictObject({
  mode: ResumeMode.default('retry'),
  /** Only these blocked tasks (default: every blocked task). */
  taskIds: z.array(TaskId).min(1).optional(),
  note: z.string().min(1).max(20_000).optional(),
  /** Higher limits for a BUDGET_EXHAUSTED session: its cancelled tasks then run again. */
  budget: BudgetRaise.optional(),
});
export type ResumeRequest = z.input<typeof ResumeRequest>;

export const PruneRequest = z.strictObject({
  /**
   * Sessions idle (no history entry, and no resume asked for and not applied yet) for longer
   * than this go.
   */
  olderThanSeconds: z.number().int().min(0),
  /** Only sessions in these finished states (default: every finished state). */
  states: z
    .array(SessionState)
    .min(1)
    .refine((states) => unfinishedStates(states).length === 0, {
      message: `only finished sessions can be pruned (${FINISHED_SESSION_STATES.join(', ')})`,
    })
    .optional(),
  /** Report what would be deleted, delete nothing. */
  dryRun: z.boolean().optional(),
});
export type PruneRequest = z.input<typeof PruneRequest>;

/** A Redis stream id, the cursor of a session's history (`1700000000000-0`). */
const STREAM_ID = /^\d+-\d+$/;
const MAX_PART = 2n ** 64n - 1n;

export const StreamId = z
  .string()
  .regex(STREAM_ID, 'a history stream id looks like 1700000000000-0')
  // Redis refuses parts above 64 bits ("Invalid stream ID"): that is bad input, not a 500.
  .refine((id) => !STREAM_ID.test(id) || id.split('-').every((p) => BigInt(p) <= MAX_PART), {
    message: 'each part of a history stream id is at most 18446744073709551615',
  });

/** What `list` takes: a page of the sessions, newest first. */
export const ListRequest = z.strictObject({
  limit: z.number().int().min(1).optional(),
  /** Sessions skipped (after the cursor, when there is one). */
  offset: z.number().int().min(0).optional(),
  /** Where the previous page ended: its `next`. Stays right as sessions come and go. */
  after: ListCursorText.optional(),
  /** Only this tenant's sessions; every page still holds `limit` of them when there are. */
  tenant: TenantId.optional(),
});
export type ListRequest = z.input<typeof ListRequest>;

/** One page of sessions, and the cursor of the next one when there are more. */
export interface SessionPage {
  sessions: Session[];
  next?: string;
}

/** What `history` takes: the entries after a stream id, at most `count` of them. */
export const HistoryRequest = z.strictObject({
  after: StreamId.optional(),
  count: z.number().int().min(1).optional(),
});
export type HistoryRequest = z.input<typeof HistoryRequest>;

/** What `result` takes. */
export const ResultRequest = z.strictObject({
  /** Give the result so far of a session still planning or running, instead of refusing it. */
  partial: z.boolean().optional(),
});
export type ResultRequest = z.input<typeof ResultRequest>;

/** What `wait` takes: how long to wait at most, and for what (WatchOptions.until). */
export const WaitOptions = z.strictObject({
  /** Milliseconds; without it the wait lasts until the session gets there. */
  timeoutMs: z.number().positive().finite().optional(),
  until: z.enum(['finished', 'settled']).optional() satisfies z.ZodType<WatchUntil | undefined>,
});
export type WaitOptions = z.input<typeof WaitOptions>;

/** Why a session was cancelled, as its history keeps it. */
export const CancelReason = z.string().min(1).max(2_000);

/** A session as client.get() reads it; `ranByBuiltin` and `builtinRoles` are builtinUse's. */
export interface SessionView extends BuiltinUse {
  session: Session;
  tasks: Task[];
  counters: Counters;
  /** Tokens per role and task, the USD estimate and the budget's state (usage-store.ts). */
  usage: SessionUsage;
  /** What each executing task is doing, when its executor reports it (by task id). */
  progress: Record<string, TaskProgress>;
  /** Executing tasks whose work job waits for a worker: none has taken it yet. */
  queued: string[];
}

export interface WatchOptions {
  /** Start after this stream id; from the beginning when absent. */
  after?: string;
  /**
   * Stop once the session is finished (default) or also when it is BLOCKED; not while a resume
   * of it waits for the coordinator.
   */
  until?: WatchUntil;
  /** Longest time one blocking read waits before re-checking the session (ms). */
  blockMs?: number;
  signal?: AbortSignal;
  /**
   * Told when the watch's connection to Redis is lost (with why) and when it is back. A watch
   * waits through an outage and goes on where it was; this lets its reader say so meanwhile.
   */
  onConnection?: (change: { up: boolean; error?: string }) => void;
}

export interface SubmitOptions {
  /**
   * Session settings the request's `config` may set (override-policy.ts patterns); any when
   * unset. The HTTP API passes http.sessionOverrides: its callers are not the operator.
   */
  allowedOverrides?: readonly string[];
  /**
   * With allowedOverrides: the `provider/model` choices (`provider/*` for any model) a request
   * may make besides those the client's config uses, as http.models lists them. A request that
   * sets allowedOverrides may also only lower the budget (caller-limits.ts).
   */
  offeredModels?: readonly string[];
}

export interface SubmitOutcome {
  session: Session;
  /** True for exactly one of the submits that share an idempotency key. */
  created: boolean;
}

/** A plan as a person writes it: context, scopePaths and dependencies may be left out. */
export type PlanBreakdownInput = z.input<typeof PlanBreakdown>;

export interface AnswerOptions {
  /**
   * The wait the person saw (session.wait.id, a question's or a step's id): refused if it is not
   * open now. A step approval's id (step-…) sends an approve or reject to that step.
   */
  waitId?: string;
  /**
   * The task whose question it answers, or (approve, reject) whose step approval it answers
   * (else `waitId`, or the only one open).
   */
  taskId?: string;
  /** Who answers, for the history (`cli`, `operator`, `tenant acme`...). */
  by?: string;
  /** How long to wait for the coordinator to apply it (default 5 s; 0: don't wait). */
  waitMs?: number;
}

export interface AnswerOutcome {
  requestId: string;
  waitId: string;
  /** The coordinator applied it within waitMs (false: still queued, applied when it runs). */
  applied: boolean;
}

export interface OrqClient {
  readonly store: SessionStore;
  submit(request: SubmitRequest, options?: SubmitOptions): Promise<Session>;
  /**
   * As submit, and says whether this call created the session: false when its idempotency key
   * named a session already, even one a concurrent submit with that key was creating.
   */
  submitWithOutcome(request: SubmitRequest, options?: SubmitOptions): Promise<SubmitOutcome>;
  get(sessionId: string): Promise<SessionView>;
  list(options?: ListRequest): Promise<Session[]>;
  /** As list, with the cursor of the next page (`after`) when there are more sessions. */
  listPage(options?: ListRequest): Promise<SessionPage>;
  history(sessionId: string, options?: HistoryRequest): Promise<StoredHistoryEntry[]>;
  historyJsonl(sessionId: string): Promise<string>;
  /**
   * What the session produced (rules/session-result.ts): the outputs of its final tasks, or of
   * the tasks its result.tasks setting names, with notes on anything missing. A session that
   * stopped short (BLOCKED, FAILED, CANCELLED, BUDGET_EXHAUSTED) gives what it did; one still
   * PLANNING or RUNNING is refused (INVALID_STATE) unless `partial` is set.
   */
  result(sessionId: string, options?: ResultRequest): Promise<SessionResult>;
  cancel(sessionId: string, reason?: string): Promise<void>;
  /**
   * Deletes a finished session and every key kept of it (record, tasks, history, usage, leases,
   * agent steps, outbox), then its index entry and its idempotency key. A submit with that key,
   * even one racing the delete, starts a new session under a new id.
   * Refuses a session still planning, running or blocked: cancel it first.
   */
  delete(sessionId: string): Promise<DeletedSession>;
  /** Deletes the finished sessions idle for longer than `olderThanSeconds`. */
  prune(request: PruneRequest): Promise<PruneReport>;
  /**
   * Asks the coordinator to resume blocked tasks and waits up to `waitMs` (default 5 s; 0: don't
   * wait) until it has applied the request, so a `wait` right after sees the resumed session.
   * Returns the request id.
   */
  resume(
    sessionId: string,
    request?: ResumeRequest,
    options?: {
      waitMs?: number;
      /**
       * Refuse a budget above the client's own config (FORBIDDEN): for callers who are not the
       * operator (the HTTP API), who may only lower a budget (issue 41).
       */
      budgetWithinConfig?: boolean;
    },
  ): Promise<string>;
  /**
   * Follows the session's history until it settles (WatchOptions.until). A resume or cancel the
   * coordinator has not applied yet keeps the watch going, so one started right after `resume`
   * or `cancel` does not end at the state from before it.
   */
  watch(sessionId: string, options?: WatchOptions): AsyncGenerator<StoredHistoryEntry>;
  /**
   * Whether a resume of the session was enqueued and the coordinator has not applied it yet
   * (its job still waits or runs), in a state a resume moves on from (BLOCKED, BUDGET_EXHAUSTED):
   * the session is about to move although its state says it stopped.
   */
  resumePending(sessionId: string): Promise<boolean>;
  /**
   * As resumePending, for a resume or a cancel: whether the session is about to move (or end)
   * although its state says it stopped. What a watch waits for before it ends.
   */
  requestPending(sessionId: string): Promise<boolean>;
  /**
   * Answers the plan approval a session AWAITING_APPROVAL waits on (issue 48): approve it, run an
   * edited plan instead (checked as a replan is: structure and required terms), or reject it
   * with feedback for the Planner. Waits up to `waitMs` (default 5 s) for the coordinator to
   * apply it. WAIT_ENDED when the wait is not open (answered, timed out, or `waitId` names an
   * older one); the same when a concurrent answer to it was applied first. ANSWER_NOT_APPLIED
   * when the coordinator failed to apply it on every try: the wait is still open.
   */
  answer(
    sessionId: string,
    answer: WaitAnswerInput,
    options?: AnswerOptions,
  ): Promise<AnswerOutcome>;
  /**
   * Answers a question a blocked task asks (issue 48): the task runs again with the question and
   * `text` in its context. Names the task (`taskId`) or the wait (`waitId`) when several ask.
   */
  answerQuestion(sessionId: string, text: string, options?: AnswerOptions): Promise<AnswerOutcome>;
  approve(
    sessionId: string,
    options?: AnswerOptions & { comment?: string },
  ): Promise<AnswerOutcome>;
  reject(sessionId: string, feedback: string, options?: AnswerOptions): Promise<AnswerOutcome>;
  editPlan(
    sessionId: string,
    plan: PlanBreakdownInput,
    options?: AnswerOptions & { allowTermLoss?: boolean; comment?: string },
  ): Promise<AnswerOutcome>;
  /**
   * Sessions that wait for a person now (AWAITING_APPROVAL, or with a question or step open) among the
   * 1,000 newest, newest first, at most `limit`.
   */
  waiting(options?: { tenant?: string; limit?: number }): Promise<Session[]>;
  /**
   * Follows the session until it settles (`until`, default 'settled': finished or BLOCKED) and
   * returns its view. Throws TIMEOUT when `timeoutMs` passes first, saying which roles run.
   */
  wait(sessionId: string, options?: WaitOptions): Promise<SessionView>;
  /**
   * How many processes consume each role's queue now, as BullMQ counts its workers (CLIENT
   * LIST); empty when the server does not answer that (some managed Redis refuse CLIENT LIST).
   */
  consumers(): Promise<Partial<Record<Role, number>>>;
  /**
   * Every provider limit (llm.<role>.rateLimit) the pods have used, with what is left of it
   * now, the calls in flight, the pause after a 429 and what it has counted (issue 33).
   */
  quotas(): Promise<QuotaView[]>;
  /** Per tenant: its sessions with work, tasks in flight and tasks waiting for a slot. */
  tenants(): Promise<TenantLoad[]>;
  close(): Promise<void>;
}

export interface CreateClientOptions {
  connection: ConnectionInput;
  /** Redis key prefix (default from config, `orq`). */
  prefix?: string;
  /** Defaults for sessions this client submits; validated like a config file. */
  config?: OrqConfigInput | OrqConfig;
  /**
   * Where a Redis outage of the client's connection is told: once when it starts (again every
   * 30 s while it lasts) and once when Redis is back, as the roles tell theirs. Without one the
   * client says nothing: its calls reject with REDIS_UNAVAILABLE meanwhile.
   */
  logger?: Logger;
}

/**
 * The keys createClient takes, checked before anything connects: an unknown one (`prefx`) was
 * ignored, and the client worked under the default prefix, beside the roles it was meant for.
 * The prefix and config are checked by parseConfig, as a config file's.
 */
const ClientOptions = z.strictObject({
  connection: ConnectionOption,
  prefix: z.unknown().optional(),
  config: z.unknown().optional(),
  logger: LoggerOption.optional(),
} satisfies Record<keyof CreateClientOptions, z.ZodType>);

/** BullMQ job states from which a job no longer runs ('unknown': removed, or never added). */
const ENDED_JOB_STATES: readonly string[] = ['completed', 'failed', 'unknown'];
/** BullMQ job states of a job no worker has taken yet: removing one means it never runs. */
const UNTAKEN_JOB_STATES: readonly string[] = [
  'waiting',
  'delayed',
  'prioritized',
  'waiting-children',
];

/**
 * Tries of an idempotent submit. A try fails when the session its key names is deleted while it
 * reads it; the next claims the key afresh, and fails again only if yet another session under
 * that key was created and deleted meanwhile.
 */
const SUBMIT_TRIES = 3;
/** Index reads of one listing page: each passes over entries whose session is gone. */
const LIST_ROUNDS = 8;

/** Sessions, and tasks in all, whose records one client keeps as get() read them. */
const TASK_CACHE_SESSIONS = 4;
/**
 * Pages of 200 sessions `waiting` reads at most: it looks among the 1,000 newest sessions (the
 * index keeps no state), so `orq status` stays one bounded read however many sessions are kept.
 */
const WAITING_PAGES = 5;
const TASK_CACHE_TASKS = 20_000;

// Every part of SessionConfig, read off the schema: a hand-kept list once missed judging and
// scheduling, so the config file's values for them never reached a session.
const SESSION_CONFIG_KEYS = Object.keys(SessionConfig.shape) as (keyof SessionConfig)[];

/** Refuses a request that sets a session setting outside `allowed`, naming each one. */
function assertOverridesAllowed(overrides: unknown, allowed: readonly string[]): void {
  const refused = overridesOutside(applyLegacyKeys(overrides ?? {}), allowed);
  if (refused.length === 0) return;
  const paths = refused.map((path) => `config.${path}`);
  throw new OrqError(
    'FORBIDDEN',
    `this API does not let a submit set ${paths.join(', ')}: ${refused.length === 1 ? 'it names' : 'they name'} what the operator decides (a program, file, endpoint, environment variable or executor)`,
    {
      hint: `Leave ${refused.length === 1 ? 'it' : 'them'} out to use the pods' own settings. The operator allows settings with http.sessionOverrides (now: ${allowed.length > 0 ? allowed.join(', ') : 'none'}).`,
      details: { refused: paths },
    },
  );
}

/** Refuses a caller's model or budget choice the operator does not offer, naming each one. */
function assertWithinCallerLimits(
  operator: SessionConfig,
  chosen: SessionConfig,
  offeredModels: readonly string[],
): void {
  const issues = callerLimitIssues(operator, chosen, offeredModels);
  if (issues.length === 0) return;
  throw new OrqError(
    'FORBIDDEN',
    `this API does not let a submit choose ${issues.map((issue) => `${issue.path} (${issue.message})`).join('; ')}`,
    {
      hint: "Choose among the offered models, or leave them out to use the pods' own; a budget may only be lowered. The operator offers more models with http.models.",
      details: { refused: issues.map((issue) => issue.path) },
    },
  );
}

/** Builds the session's effective config: client defaults, then the request's overrides. */
export function sessionConfig(
  base: OrqConfig,
  overrides: Record<string, unknown> | undefined,
): SessionConfig {
  const defaults = Object.fromEntries(SESSION_CONFIG_KEYS.map((k) => [k, base[k]]));
  // The request's legacy maxQualityRetries must map to maxRefinementAttempts before the merge:
  // the defaults always carry maxRefinementAttempts, which would otherwise always win (seed 000).
  const merged = mergeConfig(defaults, applyLegacyKeys(overrides ?? {}));
  const result = parseForPeople(SessionConfig, merged);
  if (!result.success) {
    throw new ValidationError('submit request', describeZodIssues(result.error, 'config'));
  }
  const unsubmittable = unsubmittableSettings(result.data).map((issue) => ({
    ...issue,
    path: `config.${issue.path}`,
    ...(issue.settings ? { settings: issue.settings.map((path) => `config.${path}`) } : {}),
  }));
  if (unsubmittable.length > 0) throw new ValidationError('submit request', unsubmittable);
  return result.data;
}

/** The typed producer API other systems use to submit and follow work. */
export function createClient(options: CreateClientOptions): Promise<OrqClient> {
  return openClient(options, 'connection');
}

/**
 * createClient for orq's own commands: `addressSetting` says where their user set the Redis
 * address (REDIS_URL for the CLI), so a connection error's hint names that, not the option.
 */
export async function openClient(
  options: CreateClientOptions,
  addressSetting: AddressSetting,
): Promise<OrqClient> {
  // A URL the config would refuse (http://…) otherwise waits out the connect timeout first.
  parseOrThrow(ClientOptions, options, 'client options');
  const config = parseConfig(
    mergeConfig(options.config ?? {}, options.prefix ? { redis: { prefix: options.prefix } } : {}),
    'client options',
  );
  const redis = createConnection(options.connection, 'producer');
  try {
    await ensureConnected(redis, addressSetting);
    await refuseUnfitServer(redis, addressSetting);
  } catch (error) {
    redis.disconnect();
    throw error;
  }
  // From here on: a Redis that cannot be reached at the start is the error thrown above.
  if (options.logger) {
    reportOutages(redis, new OutageLog(options.logger.child({ kind: 'producer' })));
  }
  const prefix = config.redis.prefix;
  const store = new SessionStore(redis, prefix, config.queues.historyMaxLength);
  const usageStore = new UsageStore(redis, prefix);
  const quotaStore = new QuotaStore(redis, prefix);

  /** A BUDGET_EXHAUSTED session resumes only with limits above what it has used. */
  async function checkBudgetRaise(session: Session, budget: BudgetRaise | undefined) {
    const refuse = (why: string, hint: string) =>
      new OrqError('INVALID_STATE', `session ${session.id} is BUDGET_EXHAUSTED: ${why}`, {
        hint,
        details: { sessionId: session.id, state: session.state },
      });
    if (!budget) {
      throw refuse(
        'it resumes only with a higher budget',
        `Give a higher limit: orq resume ${session.id} --max-tokens N (or --max-usd X).`,
      );
    }
    const { total } = await usageStore.read(session.id);
    const used = total.inputTokens + total.outputTokens;
    // Each call first reserves at least its output limit: a limit with less room stops again.
    const room = Math.max(...MODEL_ROLES.map((role) => leastReservation(session.config, role)));
    if (budget.maxTokens !== undefined && budget.maxTokens < used + room) {
      throw refuse(
        `maxTokens ${budget.maxTokens} leaves less than one call's reservation (${room}) above the ${used} tokens already used`,
        `Give a maxTokens of at least ${used + room} (orq status shows the usage).`,
      );
    }
    if (budget.maxUsd !== undefined && budget.maxUsd <= total.usd) {
      throw refuse(
        `maxUsd ${budget.maxUsd} is not above the $${total.usd} already spent`,
        'Give a maxUsd above what the session has spent (orq status shows it).',
      );
    }
  }
  /**
   * A resume of a BLOCKED or RUNNING session acts on its blocked tasks: say so now when it has
   * none, or names a task it does not have or that is not blocked, rather than accept a request
   * the coordinator would only record as ignored.
   */
  async function checkBlockedTasks(session: Session, taskIds: readonly string[] | undefined) {
    const tasks = await store.loadTasks(session.id, session.taskIds);
    const blocked = [...tasks.values()]
      .filter((t) => t.task.state === 'BLOCKED')
      .map((t) => t.task.id);
    const details = { sessionId: session.id, state: session.state };
    if (blocked.length === 0) {
      throw new OrqError('INVALID_STATE', `session ${session.id} has no blocked task to resume`, {
        hint: 'Only blocked tasks are resumed; `orq status <id>` (HTTP: GET /sessions/<id>) shows the state of each task.',
        details,
      });
    }
    const unknown = (taskIds ?? []).filter((id) => !tasks.has(id));
    if (unknown.length > 0) {
      throw new OrqError('NOT_FOUND', `session ${session.id} has no task ${unknown.join(', ')}`, {
        hint: `Its blocked tasks: ${blocked.join(', ')}.`,
        details: { ...details, taskIds: unknown },
      });
    }
    const notBlocked = (taskIds ?? []).filter((id) => tasks.get(id)?.task.state !== 'BLOCKED');
    if (notBlocked.length > 0) {
      const states = notBlocked.map((id) => `${id} is ${tasks.get(id)?.task.state}`).join(', ');
      throw new OrqError('INVALID_STATE', `only blocked tasks can be resumed: ${states}`, {
        hint: `Its blocked tasks: ${blocked.join(', ')}.`,
        details: { ...details, taskIds: notBlocked },
      });
    }
  }

  /**
   * The question an answer is for: the one `waitId` names, else the one task `taskId` asks, else
   * the only one open. WAIT_ENDED when it is not open (answered, the task resumed or moved on).
   */
  async function openQuestionOrThrow(
    session: Session,
    { waitId, taskId }: AnswerOptions,
  ): Promise<QuestionWait> {
    const open = session.questions ?? [];
    if (session.state === 'BUDGET_EXHAUSTED') {
      const asked =
        waitId !== undefined
          ? open.find((q) => q.id === waitId)
          : taskId !== undefined
            ? open.find((q) => q.taskId === taskId)
            : open.length === 1
              ? open[0]
              : undefined;
      if (asked) throw budgetStoppedQuestion(session, asked);
    }
    const live = ['RUNNING', 'BLOCKED'].includes(session.state);
    const found = !live
      ? undefined
      : waitId !== undefined
        ? open.find((q) => q.id === waitId && (taskId === undefined || q.taskId === taskId))
        : taskId !== undefined
          ? open.find((q) => q.taskId === taskId)
          : open.length === 1
            ? open[0]
            : undefined;
    if (!found && live && waitId === undefined && taskId === undefined && open.length > 1) {
      throw new OrqError(
        'VALIDATION_FAILED',
        `session ${session.id} asks ${open.length} questions`,
        {
          hint: `Name the task whose question you answer: ${open.map((q) => q.taskId).join(', ')}.`,
          details: { sessionId: session.id, waitIds: open.map((q) => q.id) },
        },
      );
    }
    if (!found) {
      const what = waitId ?? (taskId ? `the question of task ${taskId}` : undefined);
      const why = !live
        ? `it is ${session.state}`
        : open.length === 0
          ? 'no question is open'
          : `the open questions are ${open.map((q) => q.id).join(', ')}`;
      const current = taskId ? open.find((q) => q.taskId === taskId)?.id : undefined;
      throw new WaitEndedError(session.id, what, why, current);
    }
    // The session's record says open; the task says whether it still waits at that execution:
    // BLOCKED for a Judge's question, still executing for an agent's (issue 48).
    const task = (await store.loadTasks(session.id, [found.taskId])).get(found.taskId)?.task;
    const waiting =
      found.step === undefined ? task?.state === 'BLOCKED' : !!task && isExecuting(task);
    if (!waiting || task?.attempts !== found.attempt) {
      throw new WaitEndedError(session.id, found.id, `task ${found.taskId} moved on`);
    }
    return found;
  }

  /**
   * The question of a session its budget stopped, which stays open: nothing runs to apply an
   * answer until the budget is raised, so the answer is refused, saying how to go on.
   */
  function budgetStoppedQuestion(session: Session, question: QuestionWait): OrqError {
    return new OrqError(
      'BUDGET_EXHAUSTED',
      `session ${session.id} is stopped by its budget (BUDGET_EXHAUSTED); its question ${question.id} stays open, and is answered once the budget is raised`,
      {
        hint: `${BUDGET_RESUME_HINT}: orq resume ${session.id} --max-tokens <n> or --max-usd <usd> (HTTP: POST /sessions/${session.id}/resume with a budget); then answer: orq answer ${session.id} --task ${question.taskId} "…"`,
        details: { sessionId: session.id, waitId: question.id, taskId: question.taskId },
      },
    );
  }

  /**
   * The step approval an approve or reject is for (approval.steps): the one `waitId` names, else
   * the one of task `taskId`, else the only one open. WAIT_ENDED when it is not open.
   */
  async function openStepOrThrow(
    session: Session,
    { waitId, taskId }: AnswerOptions,
  ): Promise<StepApprovalWait> {
    const open = session.state === 'RUNNING' ? (session.stepWaits ?? []) : [];
    const found =
      waitId !== undefined
        ? open.find((w) => w.id === waitId && (taskId === undefined || w.taskId === taskId))
        : taskId !== undefined
          ? open.find((w) => w.taskId === taskId)
          : open.length === 1
            ? open[0]
            : undefined;
    if (!found && waitId === undefined && taskId === undefined && open.length > 1) {
      throw new OrqError(
        'VALIDATION_FAILED',
        `session ${session.id} has ${open.length} steps waiting`,
        {
          hint: `Name the wait you answer (--wait): ${open.map((w) => w.id).join(', ')}.`,
          details: { sessionId: session.id, waitIds: open.map((w) => w.id) },
        },
      );
    }
    if (!found) {
      const why =
        session.state !== 'RUNNING'
          ? `it is ${session.state}`
          : open.length === 0
            ? 'no step waits for approval'
            : `the steps waiting are ${open.map((w) => w.id).join(', ')}`;
      throw new WaitEndedError(
        session.id,
        waitId ?? (taskId ? `the step of task ${taskId}` : undefined),
        why,
      );
    }
    const task = (await store.loadTasks(session.id, [found.taskId])).get(found.taskId)?.task;
    if (!task || !isExecuting(task) || task.attempts !== found.attempt) {
      throw new WaitEndedError(session.id, found.id, `task ${found.taskId} moved on`);
    }
    return found;
  }

  /** Whether an approve or reject is for a step approval rather than the plan's. */
  const answersStep = (session: Session, { waitId, taskId }: AnswerOptions): boolean =>
    waitId !== undefined
      ? waitId.startsWith('step-')
      : taskId !== undefined ||
        (session.state !== 'AWAITING_APPROVAL' && (session.stepWaits ?? []).length > 0);

  /** The plan approval the session waits on, if `waitId` (when given) names it. */
  function openWaitOrThrow(session: Session, waitId: string | undefined) {
    const { wait } = session;
    if (session.state !== 'AWAITING_APPROVAL' || !wait) {
      throw new WaitEndedError(session.id, waitId, `it is ${session.state}, not AWAITING_APPROVAL`);
    }
    if (waitId !== undefined && wait.id !== waitId) {
      throw new WaitEndedError(session.id, waitId, `a later plan waits now`, wait.id);
    }
    return wait;
  }

  const queues = new QueueSet(
    redis,
    prefix,
    defaultJobOptions(config.queues),
    config.queues.taskJobNames,
  );
  const blockingConnections = new Set<RedisConnection>();

  /**
   * Enqueues a resume or cancel (`job`, its id the event id) and records it as pending: a watch
   * started from here on goes on through the state from before it until the coordinator
   * applies it. The add comes first, so a recorded request always has a job (a watch drops a
   * record whose job it cannot find). If the record cannot be written, the job is taken back
   * while no coordinator has taken it, so the caller's retry does not queue a second one.
   * BullMQ removes no job a worker holds; one taken already, or a Redis that does not answer,
   * leaves the job as it is. A retry then queues another request, which the coordinator applies
   * to the session as it then is: a budget resume of a session no longer BUDGET_EXHAUSTED, or a
   * retry with no task blocked any more, is ignored.
   */
  async function enqueueRequest(sessionId: string, job: OutboxJob): Promise<void> {
    await queues.add(job);
    try {
      await markRequestPending(store, sessionId, job.jobId);
    } catch (error) {
      const coordinator = queues.get(ROLE_QUEUE.coordinator);
      try {
        if (UNTAKEN_JOB_STATES.includes(await coordinator.getJobState(job.jobId))) {
          await coordinator.remove(job.jobId);
        }
      } catch {
        // The call fails with the mark's error; this one says nothing more.
      }
      throw error;
    }
  }

  const guard = async <T>(fn: () => Promise<T>): Promise<T> => {
    try {
      return await fn();
    } catch (error) {
      throw asRedisUnavailable(error, addressSetting, redis);
    }
  };

  const taskViews = new TaskViewCache(TASK_CACHE_SESSIONS, TASK_CACHE_TASKS);

  /** The session and its tasks in plan order, the tasks read through the task view cache. */
  async function loadWithTasks(sessionId: string) {
    const snapshot = await store.requireSession(sessionId);
    const tasks = await store.loadTasksInOrder(
      sessionId,
      snapshot.session.taskIds,
      taskViews.of(sessionId),
    );
    taskViews.trim();
    return { snapshot, tasks };
  }

  const get = (sessionId: string): Promise<SessionView> =>
    guard(async () => {
      parseOrThrow(SessionId, sessionId, 'session id');
      const { snapshot, tasks } = await loadWithTasks(sessionId);
      const usage = await usageStore.read(sessionId);
      const { progress, queued } = await readRunningJobs(queues, sessionId, tasks);
      const { counters } = snapshot;
      const { session } = snapshot;
      return { session, tasks, counters, usage, progress, queued, ...builtinUse(session.config) };
    });

  /**
   * Those of the session's pending `eventIds` whose coordinator job may still run (waiting,
   * delayed, active...). The records of the others are dropped: their jobs ended (failed for
   * good, removed, or completed without applying), so their resumes never will be applied, and
   * each idle poll of a watch would look them up again until the session is deleted.
   */
  async function stillQueued(sessionId: string, eventIds: readonly string[]): Promise<string[]> {
    const coordinator = queues.get(ROLE_QUEUE.coordinator);
    const states = await Promise.all(eventIds.map((id) => coordinator.getJobState(id)));
    const ended = (_: string, i: number) => ENDED_JOB_STATES.includes(states[i] ?? 'unknown');
    await dropPendingRequests(store, sessionId, eventIds.filter(ended));
    return eventIds.filter((id, i) => !ended(id, i));
  }

  /**
   * Whether a watch of the session ends now (watchEnds). A resume recorded as pending counts
   * only while its job may still run: one whose job failed for good or was removed will never
   * be applied, and must not hold every watch of the session open for ever.
   */
  async function watchIsOver(sessionId: string, until: WatchUntil): Promise<boolean> {
    const first = await readSettling(store, sessionId);
    // Running, or planning: no resume to look at.
    if (!watchEnds(first.state, until, false)) return false;
    // No resume, or a state no resume moves on from (one queued before a cancel is ignored).
    if (first.pendingRequests.length === 0 || watchEnds(first.state, until, true)) return true;
    if ((await stillQueued(sessionId, first.pendingRequests)).length > 0) return false;
    // Those jobs ended without applying their resume. Read again: a resume applied between the
    // first read and the job's end has moved the session on.
    const stale = new Set(first.pendingRequests);
    const again = await readSettling(store, sessionId);
    return watchEnds(
      again.state,
      until,
      again.pendingRequests.some((id) => !stale.has(id)),
    );
  }

  /** Whether a request of the session that `counts` counts waits for the coordinator. */
  function requestPending(
    sessionId: string,
    counts: (eventId: string) => boolean,
  ): Promise<boolean> {
    return guard(async () => {
      parseOrThrow(SessionId, sessionId, 'session id');
      const { state, pendingRequests } = await readSettling(store, sessionId);
      // As every call about one session: a wrong id is not a session with nothing pending.
      if (state === undefined) throw sessionNotFound(sessionId);
      // A request queued before a cancel or a completion is ignored when it is applied.
      if (!REQUEST_SETTLED_STATES.includes(state)) return false;
      const counted = pendingRequests.filter(counts);
      return counted.length > 0 && (await stillQueued(sessionId, counted)).length > 0;
    });
  }

  async function* watch(
    sessionId: string,
    watchOptions: WatchOptions = {},
  ): AsyncGenerator<StoredHistoryEntry> {
    const until = watchOptions.until ?? 'finished';
    const blockMs = watchOptions.blockMs ?? 1_000;
    const listening = new AbortController(); // ends the waits below with the watch
    const reader = blockingTwin(redis);
    let down = false;
    reader.on('error', (error: Error) => {
      if (down) return;
      down = true;
      watchOptions.onConnection?.({ up: false, error: error.message });
    });
    // Back only once the client's own connection is too: it reconnects on a schedule of its
    // own, up to 2 s after the reader, and the watch (and a get after it) reads through it.
    reader.on('ready', () => {
      if (!down) return;
      untilReady(redis, listening.signal)
        .then((ready) => {
          if (!ready || !down || reader.status !== 'ready') return;
          down = false;
          watchOptions.onConnection?.({ up: true });
        })
        .catch(() => undefined); // a client closed meanwhile: the watch ends with it
    });
    blockingConnections.add(reader);
    let cursor = watchOptions.after ?? '0-0';
    const key = store.keys(sessionId).history;
    // The reader waits through a Redis outage (its reads queue until Redis is back), and
    // ioredis does not fail a queued read when the reader is closed meanwhile: an abort must
    // not wait for the read, only for whichever comes first.
    const { signal } = watchOptions;
    const aborted = new Promise<'aborted'>((resolve) => {
      signal?.addEventListener('abort', () => resolve('aborted'), {
        once: true,
        signal: listening.signal,
      });
    });
    /** Set by entriesOf when the session itself changed state: the watch may be over. */
    let sessionMoved = false;
    /** The entries of one XREAD reply, moving the cursor past each. */
    function* entriesOf(
      reply: [string, [string, string[]][]][] | null,
    ): Generator<StoredHistoryEntry> {
      for (const [, entries] of reply ?? []) {
        for (const [id, fields] of entries) {
          cursor = id;
          const index = fields.indexOf('e');
          const entry = JSON.parse(fields[index + 1] ?? '{}') as HistoryEntry;
          if (entry.type === 'state_change' && entry.entity === 'session') sessionMoved = true;
          yield { id, entry };
        }
      }
    }
    /**
     * watchIsOver through the client's own connection, which fails fast while it reconnects
     * (after an outage, or dropped alone) and rejects a read it cut off: waited for and asked
     * again, as the reader waits through an outage. A client closed meanwhile fails the watch.
     */
    async function settledThroughDrops(): Promise<boolean | 'aborted'> {
      for (;;) {
        if (!(await untilReady(redis, signal))) return 'aborted';
        try {
          return await watchIsOver(sessionId, until);
        } catch (error) {
          if (!isTransportError(error) || redis.status === 'ready' || redis.status === 'end') {
            throw error;
          }
        }
      }
    }
    try {
      parseOrThrow(SessionId, sessionId, 'session id');
      // Redis would refuse a malformed cursor with a bare ReplyError on the first read.
      parseOrThrow(z.object({ after: StreamId.optional() }), watchOptions, 'watch options');
      await store.requireSession(sessionId);
      for (;;) {
        if (signal?.aborted) return;
        const reply = await Promise.race([
          reader.xread('COUNT', 500, 'BLOCK', blockMs, 'STREAMS', key, cursor),
          aborted,
        ]);
        if (reply === 'aborted') return;
        sessionMoved = false;
        yield* entriesOf(reply);
        // More may come, unless the session just moved where the watch ends: asked at once, not
        // after another blockMs without entries (which every watch and wait would sit out).
        if (reply && reply.length > 0 && !sessionMoved) continue;
        // Nothing new, or the session moved: stop once it has settled and every entry was read.
        const over = await settledThroughDrops();
        if (over === 'aborted') return;
        if (over) {
          // The write that settled it may have come after the read above, with its entries
          // (the state change to COMPLETED): read on to the end once more, without waiting.
          for (;;) {
            const rest = await reader.xread('COUNT', 500, 'STREAMS', key, cursor);
            if (!rest || rest.length === 0) return;
            yield* entriesOf(rest);
          }
        }
      }
    } catch (error) {
      // A watcher learns that Redis went away as REDIS_UNAVAILABLE, like every other call.
      throw asRedisUnavailable(error, addressSetting, redis);
    } finally {
      listening.abort();
      blockingConnections.delete(reader);
      reader.disconnect();
    }
  }

  const submitWithOutcome = (
    request: SubmitRequest,
    options: SubmitOptions = {},
  ): Promise<SubmitOutcome> =>
    guard(async () => {
      const parsed = parseOrThrow(SubmitRequest, request, 'submit request');
      const effective = sessionConfig(config, parsed.config);
      if (options.allowedOverrides) {
        assertOverridesAllowed(parsed.config, options.allowedOverrides);
        assertWithinCallerLimits(
          sessionConfig(config, undefined),
          effective,
          options.offeredModels ?? [],
        );
      }
      const key = parsed.idempotencyKey;
      // A try ends without an answer only when its key named a session deleted meanwhile (a
      // fresh id never does), and the next one claims the key for a new session.
      for (let tries = 0; tries < SUBMIT_TRIES; tries += 1) {
        const outcome =
          key === undefined ? await submitSession(randomUUID()) : await submitWithKey(key);
        if (outcome) return outcome;
      }
      throw new OrqError(
        'CONFLICT',
        `idempotency key "${key}" named a session deleted during this submit, ${SUBMIT_TRIES} times in a row`,
        {
          hint: "Retry the submit. If it keeps failing, this key's sessions are deleted as soon as they finish (orq delete, orq prune, retention.deleteFinishedAfterSeconds): delete them later, or use a new key.",
          details: { idempotencyKey: key },
        },
      );

      /** One try: the session the key names, or a new one; undefined if that one was deleted. */
      async function submitWithKey(key: string): Promise<SubmitOutcome | undefined> {
        const sessionId = randomUUID();
        const existing = await store.claimIdempotencyKey(key, sessionId);
        if (!existing) return submitSession(sessionId);
        const snapshot = await store.loadSession(existing);
        if (snapshot) {
          assertSameRequest(snapshot.session);
          // The first submit may have died after storing the session, before indexing it
          // or enqueueing its plan job: both are safe to repeat, and the retry finishes it.
          await store.indexSession(snapshot.session);
          await flushOutbox(store, queues, existing);
          return { session: snapshot.session, created: false };
        }
        // The first submit claimed the key but died before storing the session: finish it.
        const outcome = await submitSession(existing);
        // Undefined: it had been stored, and was deleted since (its delete not yet done with the
        // key). Free the key as that delete is about to: the next try claims it for a new
        // session, as a submit that came after the delete would.
        if (!outcome) await store.releaseIdempotencyKey(key, existing);
        return outcome;
      }

      /**
       * A key names one request: the same key with another instruction, config or metadata
       * is a caller's bug, and handing back the old session would hide it. Sessions stored
       * before the digest existed carry none: only their instruction is compared.
       */
      function assertSameRequest(stored: Session): void {
        const conflict = (what: string, hint: string) =>
          new OrqError(
            'CONFLICT',
            `idempotency key "${parsed.idempotencyKey}" was used for ${what} (session ${stored.id})`,
            { hint, details: { idempotencyKey: parsed.idempotencyKey, sessionId: stored.id } },
          );
        if (stored.instruction !== parsed.instruction) {
          throw conflict(
            'another instruction',
            'Use a new key for a new request; the same key only for a retry of the same one.',
          );
        }
        const digest = stored.requestDigest;
        if (digest !== undefined && digest !== submitDigest(parsed)) {
          throw conflict(
            'the same instruction with another config or metadata',
            'A retry sends the same request; use a new key to submit it with other settings.',
          );
        }
      }

      /**
       * Creates session `id` in the span that roots the session's trace: its plan job carries
       * the span's context (tracing/trace.ts), and every later job the context of its cause.
       */
      function submitSession(id: string): Promise<SubmitOutcome | undefined> {
        return inSpan(
          'submit_session',
          { kind: SpanKind.PRODUCER, sessionId: id, attributes: { 'orq.session.id': id } },
          () => storeSession(id),
        );
      }

      /** Stores session `id`; undefined when the id is a deleted session's, which stays deleted. */
      async function storeSession(id: string): Promise<SubmitOutcome | undefined> {
        const now = new Date().toISOString();
        const requiredTerms = extractRequiredTerms(parsed.instruction, {
          customTerms: effective.refinement.customRequiredTerms,
        });
        const session = Session.parse({
          id,
          instruction: parsed.instruction,
          state: 'PLANNING',
          createdAt: now,
          updatedAt: now,
          requiredTerms,
          config: effective,
          planning: {},
          taskIds: [],
          metadata: parsed.metadata ?? {},
          ...(parsed.tenant !== undefined ? { tenant: parsed.tenant } : {}),
          ...(parsed.priority !== undefined ? { priority: parsed.priority } : {}),
          ...(parsed.idempotencyKey
            ? { idempotencyKey: parsed.idempotencyKey, requestDigest: submitDigest(parsed) }
            : {}),
          ...withTraceparent({}),
        });
        // Indexed first: a submit that dies after storing the session leaves it where the
        // outbox sweeper looks (the newest sessions), so its plan job is enqueued anyway.
        await store.indexSession(session);
        const result = await store.apply(id, {
          eventId: `submit|${id}`,
          session: { record: session, expectedVersion: 0 },
          outbox: [
            inBand(
              session,
              outboxJob('plan', 'plan', jobIds.plan(id, 0), { sessionId: id, attempt: 0 }),
            ),
          ],
          history: [
            { type: 'state_change', entity: 'session', to: 'PLANNING', reason: 'submitted' },
            {
              type: 'decision',
              decision: 'terms:extracted',
              reason: `required terms: ${requiredTerms.terms.join(', ') || '(none)'}`,
              inputs: { requiredTerms },
            },
          ],
        });
        if (result.status === 'GONE') {
          // Indexed above, maybe after the delete dropped the entry: it must not name the id.
          await store.unindexSession(id, session.tenant);
          return undefined;
        }
        if (result.status !== 'OK' && result.status !== 'DUPLICATE') {
          throw new OrqError('CONFLICT', `session ${id} already exists`, {
            details: { sessionId: id },
          });
        }
        await flushOutbox(store, queues, id);
        const stored = (await store.requireSession(id)).session;
        // Two first submits with one key race for one id: the one whose session was stored
        // second finds the other's (DUPLICATE) and must not answer with it unchecked.
        if (parsed.idempotencyKey) assertSameRequest(stored);
        // DUPLICATE: a concurrent submit with the key stored it first, and answers as its creator.
        return { session: stored, created: result.status === 'OK' };
      }
    });

  function listPage(listOptions: ListRequest = {}): Promise<SessionPage> {
    return guard(async () => {
      const request = parseOrThrow(ListRequest, listOptions, 'list options');
      const limit = request.limit ?? 50;
      const { tenant } = request;
      const found: { session: Session; entry: ListCursor }[] = [];
      let after = request.after !== undefined ? parseCursor(request.after) : undefined;
      let offset = request.offset ?? 0;
      // One more than the page, to tell whether a next page exists. An entry whose session is
      // gone (deleted since, or mid-submit) is passed over and the next read: boundedly.
      for (let round = 0; round < LIST_ROUNDS; round += 1) {
        const want = limit + 1 - found.length;
        const entries = await store.index.page({
          limit: want,
          offset,
          ...(after ? { after } : {}),
          ...(tenant !== undefined ? { tenant } : {}),
        });
        offset = 0;
        const snapshots = await Promise.all(entries.map((entry) => store.loadSession(entry.id)));
        for (const [i, snapshot] of snapshots.entries()) {
          if (!snapshot || (tenant !== undefined && snapshot.session.tenant !== tenant)) continue;
          found.push({ session: snapshot.session, entry: entries[i]! });
        }
        if (entries.length < want) return { sessions: found.map((f) => f.session) };
        if (found.length > limit) {
          const page = found.slice(0, limit);
          return { sessions: page.map((f) => f.session), next: formatCursor(page.at(-1)!.entry) };
        }
        after = entries.at(-1);
      }
      // Many entries in a row named no session: a short page, and the cursor to read on from.
      return {
        sessions: found.map((f) => f.session),
        ...(after ? { next: formatCursor(after) } : {}),
      };
    });
  }

  function tenants(): Promise<TenantLoad[]> {
    return guard(() => readTenantLoad(store.redis, store.prefix, queues.fair));
  }

  function consumers(): Promise<Partial<Record<Role, number>>> {
    return guard(async () => {
      const counts = await Promise.all(
        Role.options.map(async (role) => {
          const count = await queues
            .get(ROLE_QUEUE[role])
            .getWorkersCount()
            .catch((error: unknown) => {
              // A server that refuses CLIENT LIST cannot tell; a lost one is REDIS_UNAVAILABLE.
              if (isTransportError(error)) throw error;
              return undefined;
            });
          return [role, count] as const;
        }),
      );
      return Object.fromEntries(counts.filter(([, count]) => count !== undefined));
    });
  }

  /**
   * A wait that ran out of time: TIMEOUT, not INVALID_STATE (nothing is wrong with the session),
   * with whether its roles run here, the usual reason a session does not move.
   */
  async function waitTimedOut(session: Session, timeoutMs: number): Promise<OrqError> {
    const counts = await consumers().catch(() => ({}) as Partial<Record<Role, number>>);
    const missing = Role.options.filter((role) => counts[role] === 0);
    const where = `on this Redis under prefix "${prefix}"`;
    const hint =
      Object.keys(counts).length === 0
        ? `Check that roles run ${where} (client.consumers() counts them), or wait longer (a higher timeoutMs).`
        : missing.length === Role.options.length
          ? `No roles run ${where} (client.consumers() counts none): start them (orq start, or startRoles) with the same Redis and prefix.`
          : missing.length > 0
            ? `No process runs the ${missing.join(', ')} role${missing.length > 1 ? 's' : ''} ${where} (client.consumers()): start ${missing.length > 1 ? 'them' : 'it'} with the same Redis and prefix.`
            : 'Its roles run: wait longer (a higher timeoutMs), or check the pods and their logs.';
    return new OrqError(
      'TIMEOUT',
      `wait for session ${session.id} timed out after ${timeoutMs} ms: it is still ${session.state}`,
      {
        hint,
        details: { sessionId: session.id, state: session.state, timeoutMs, consumers: counts },
      },
    );
  }

  const client: OrqClient = {
    store,

    submit: async (request, options) => (await submitWithOutcome(request, options)).session,

    submitWithOutcome,

    get,

    quotas: () => guard(() => quotaStore.report()),

    list: async (listOptions = {}) => (await listPage(listOptions)).sessions,

    listPage,

    history: (sessionId, historyOptions) =>
      guard(async () => {
        parseOrThrow(SessionId, sessionId, 'session id');
        const parsed = parseOrThrow(HistoryRequest, historyOptions ?? {}, 'history options');
        await store.requireSession(sessionId);
        return store.history(sessionId, parsed);
      }),

    historyJsonl: (sessionId) =>
      guard(async () => {
        parseOrThrow(SessionId, sessionId, 'session id');
        await store.requireSession(sessionId);
        const entries = await store.history(sessionId);
        return (
          entries.map((e) => JSON.stringify(e.entry)).join('\n') + (entries.length ? '\n' : '')
        );
      }),

    result: (sessionId, resultOptions) =>
      guard(async () => {
        parseOrThrow(SessionId, sessionId, 'session id');
        const { partial } = parseOrThrow(ResultRequest, resultOptions ?? {}, 'result options');
        const { snapshot, tasks } = await loadWithTasks(sessionId);
        const { session } = snapshot;
        const result = deriveSessionResult(session, tasks);
        if (!partial && !resultIsFinal(session.state)) throw resultNotFinal(result);
        return result;
      }),

    cancel: (sessionId, reason = 'cancelled by user') =>
      guard(async () => {
        parseOrThrow(SessionId, sessionId, 'session id');
        // The reason goes into the job and the history: bounded as the HTTP API bounds it.
        parseOrThrow(z.object({ reason: CancelReason }), { reason }, 'cancel request');
        const { session } = await store.requireSession(sessionId);
        if (FINISHED_SESSION_STATES.includes(session.state)) {
          throw new OrqError('INVALID_STATE', `Session ${sessionId} is already ${session.state}`, {
            hint: 'Only sessions still planning, running or blocked can be cancelled.',
            details: { sessionId, state: session.state },
          });
        }
        // Recorded as a resume is: a wait right after the cancel goes on through the BLOCKED
        // state from before it until the coordinator applies it.
        await inSessionTrace('cancel_session', session, () =>
          enqueueRequest(
            sessionId,
            outboxJob('coordinator', 'cancel', jobIds.cancel(sessionId, randomUUID()), {
              sessionId,
              reason,
            }),
          ),
        );
      }),

    delete: (sessionId) =>
      guard(async () => {
        parseOrThrow(SessionId, sessionId, 'session id');
        const outcome = await deleteSession(store, sessionId);
        if (outcome.status === 'NOT_FOUND') throw sessionNotFound(sessionId);
        if (outcome.status === 'UNFINISHED') {
          throw new OrqError(
            'INVALID_STATE',
            `session ${sessionId} is ${outcome.state}: only a finished session can be deleted`,
            {
              hint: `Cancel it first (orq cancel ${sessionId}, or POST /sessions/${sessionId}/cancel); delete it once it is CANCELLED.`,
              details: { sessionId, state: outcome.state },
            },
          );
        }
        return { sessionId, state: outcome.state };
      }),

    prune: (request) =>
      guard(async () => {
        const parsed = parseOrThrow(PruneRequest, request, 'prune request');
        return pruneSessions(store, {
          cutoffMs: Date.now() - parsed.olderThanSeconds * 1000,
          ...(parsed.states ? { states: parsed.states } : {}),
          ...(parsed.dryRun ? { dryRun: true } : {}),
        });
      }),

    resume: (sessionId, request = {}, resumeOptions = {}) =>
      guard(async () => {
        parseOrThrow(SessionId, sessionId, 'session id');
        const parsed = parseOrThrow(ResumeRequest, request, 'resume request');
        if (resumeOptions.budgetWithinConfig && parsed.budget) {
          const ceiling = config.budget;
          const over = (['maxTokens', 'maxUsd'] as const).filter((limit) => {
            const asked = parsed.budget?.[limit];
            const max = ceiling[limit];
            return asked !== undefined && max !== undefined && asked > max;
          });
          if (over.length > 0) {
            throw new OrqError(
              'FORBIDDEN',
              `this API does not let a resume raise ${over.map((limit) => `budget.${limit} above this server's ${ceiling[limit]}`).join(' or ')}`,
              {
                hint: 'Ask the operator: `orq resume` with --max-tokens or --max-usd is not limited.',
                details: { refused: over.map((limit) => `budget.${limit}`) },
              },
            );
          }
        }
        const { session } = await store.requireSession(sessionId);
        if (session.state === 'BUDGET_EXHAUSTED') {
          await checkBudgetRaise(session, parsed.budget);
        } else if (integrationResumable(session)) {
          // Its integration runs again (a budget or task ids have nothing to act on).
          if (parsed.budget || parsed.taskIds) {
            throw new OrqError(
              'INVALID_STATE',
              `session ${sessionId} failed in its integration (${session.failure?.code ?? ''}): a resume runs the integration again, with no budget or task ids`,
              { hint: 'Resume without them.', details: { sessionId, state: session.state } },
            );
          }
        } else if (!RESUMABLE_SESSION_STATES.includes(session.state)) {
          throw new OrqError('INVALID_STATE', `session ${sessionId} is ${session.state}`, {
            hint: 'Only BLOCKED (or RUNNING with blocked tasks) and BUDGET_EXHAUSTED sessions, and sessions whose integration failed, can be resumed.',
            details: { sessionId, state: session.state },
          });
        } else if (parsed.budget) {
          throw new OrqError(
            'INVALID_STATE',
            `session ${sessionId} is ${session.state}: a budget is only given to resume a BUDGET_EXHAUSTED session`,
            { hint: 'Resume without a budget.', details: { sessionId, state: session.state } },
          );
        } else {
          await checkBlockedTasks(session, parsed.taskIds);
        }
        const requestId = randomUUID();
        const eventId = jobIds.resume(sessionId, requestId);
        const last = await store.lastHistoryId(sessionId);
        await inSessionTrace('resume_session', session, () =>
          enqueueRequest(
            sessionId,
            outboxJob('coordinator', 'resume', eventId, {
              sessionId,
              mode: parsed.mode,
              requestId,
              ...(parsed.taskIds ? { taskIds: parsed.taskIds } : {}),
              ...(parsed.note ? { note: parsed.note } : {}),
              ...(parsed.budget ? { budget: parsed.budget } : {}),
            }),
          ),
        );
        const waitMs = resumeOptions.waitMs ?? 5_000;
        if (waitMs > 0) {
          // Without a running coordinator the request stays queued: that is not an error.
          const signal = AbortSignal.timeout(waitMs);
          for await (const { entry } of watch(sessionId, {
            ...(last ? { after: last } : {}),
            signal,
            blockMs: Math.min(waitMs, 500),
          })) {
            const inputs = entry.type === 'decision' ? entry.inputs : undefined;
            if (inputs?.requestId === requestId || inputs?.eventId === eventId) break;
          }
        }
        return requestId;
      }),

    answer: (sessionId, answer, answerOptions = {}) =>
      guard(async () => {
        parseOrThrow(SessionId, sessionId, 'session id');
        const parsed = parseOrThrow(WaitAnswer, answer, 'answer');
        if (answerOptions.waitId !== undefined) {
          parseOrThrow(WaitId, answerOptions.waitId, 'wait id');
        }
        if (answerOptions.taskId !== undefined) {
          parseOrThrow(TaskId, answerOptions.taskId, 'task id');
        }
        const { session } = await store.requireSession(sessionId);
        const wait =
          parsed.action === 'answer'
            ? await openQuestionOrThrow(session, answerOptions)
            : parsed.action !== 'edit' && answersStep(session, answerOptions)
              ? await openStepOrThrow(session, answerOptions)
              : openWaitOrThrow(session, answerOptions.waitId);
        if (parsed.action === 'edit' && wait.kind === 'plan-approval') {
          const check = checkPlanEdit({
            waiting: wait.plan,
            edited: parsed.plan,
            config: session.config.refinement,
            requiredTerms: session.requiredTerms,
            maxTasks: session.config.budget.maxTasks,
            allowTermLoss: parsed.allowTermLoss === true,
          });
          if (!check.accepted) {
            throw new ValidationError(
              'edited plan',
              check.problems.map((message) => ({ path: 'plan', message })),
              {
                hint: 'An edit passes the rules a replan passes (docs/people-in-the-loop.md).',
                details: { sessionId, waitId: wait.id, droppedTerms: check.droppedTerms },
              },
            );
          }
        }
        const requestId = randomUUID();
        const eventId = jobIds.answer(sessionId, requestId);
        const last = await store.lastHistoryId(sessionId);
        await inSessionTrace('answer_wait', session, () =>
          enqueueRequest(
            sessionId,
            outboxJob('coordinator', 'answer', eventId, {
              sessionId,
              waitId: wait.id,
              requestId,
              answer: parsed,
              ...(answerOptions.by ? { by: answerOptions.by } : {}),
            }),
          ),
        );
        const waitMs = answerOptions.waitMs ?? 5_000;
        let applied = false;
        if (waitMs > 0) {
          const signal = AbortSignal.timeout(waitMs);
          for await (const { entry } of watch(sessionId, {
            ...(last ? { after: last } : {}),
            signal,
            blockMs: Math.min(waitMs, 500),
          })) {
            if (entry.type !== 'decision') continue;
            if (entry.inputs.requestId === requestId) {
              applied = true;
              break;
            }
            if (entry.decision === 'wait:answer-failed' && entry.inputs.eventId === eventId) {
              throw new OrqError('ANSWER_NOT_APPLIED', entry.reason, {
                hint: `Answer again: orq status ${sessionId} shows what waits; the session's history (orq history ${sessionId}) has the coordinator's error.`,
                details: { sessionId, waitId: wait.id, requestId },
              });
            }
            if (entry.decision === 'event:ignored' && entry.inputs.eventId === eventId) {
              const now = (await store.requireSession(sessionId)).session;
              // Stopped by its budget after the answer was sent: the question is still open.
              const stillAsked = now.questions?.find((q) => q.id === wait.id);
              if (now.state === 'BUDGET_EXHAUSTED' && stillAsked) {
                throw budgetStoppedQuestion(now, stillAsked);
              }
              throw new WaitEndedError(
                sessionId,
                wait.id,
                entry.reason.replace(/^answer: /, ''),
                now.wait?.id ??
                  now.questions?.find((q) => wait.kind === 'question' && q.taskId === wait.taskId)
                    ?.id,
              );
            }
          }
        }
        return { requestId, waitId: wait.id, applied };
      }),

    approve: (sessionId, { comment, ...rest } = {}) =>
      client.answer(sessionId, { action: 'approve', ...(comment ? { comment } : {}) }, rest),

    answerQuestion: (sessionId, text, answerOptions) =>
      client.answer(sessionId, { action: 'answer', text }, answerOptions),

    reject: (sessionId, feedback, answerOptions) =>
      client.answer(sessionId, { action: 'reject', feedback }, answerOptions),

    editPlan: (sessionId, plan, { allowTermLoss, comment, ...rest } = {}) =>
      client.answer(
        sessionId,
        {
          action: 'edit',
          plan: plan as PlanBreakdown,
          ...(allowTermLoss ? { allowTermLoss } : {}),
          ...(comment ? { comment } : {}),
        },
        rest,
      ),

    waiting: (waitingOptions = {}) =>
      guard(async () => {
        const limit = waitingOptions.limit ?? 100;
        const found: Session[] = [];
        let after: string | undefined;
        // The index has no state: page through it, keeping the sessions that wait.
        for (let page = 0; page < WAITING_PAGES && found.length < limit; page += 1) {
          const { sessions, next } = await listPage({
            limit: 200,
            ...(after ? { after } : {}),
            ...(waitingOptions.tenant ? { tenant: waitingOptions.tenant } : {}),
          });
          found.push(
            ...sessions.filter(
              (x) =>
                x.state === 'AWAITING_APPROVAL' ||
                (['RUNNING', 'BLOCKED'].includes(x.state) &&
                  ((x.questions ?? []).length > 0 || (x.stepWaits ?? []).length > 0)),
            ),
          );
          if (!next) break;
          after = next;
        }
        return found.slice(0, limit);
      }),

    watch,

    resumePending: (sessionId) => requestPending(sessionId, isResumeEvent),

    requestPending: (sessionId) => requestPending(sessionId, () => true),

    wait: async (sessionId, waitOptions = {}) => {
      const { timeoutMs, until = 'settled' } = parseOrThrow(
        WaitOptions,
        waitOptions,
        'wait options',
      );
      const controller = new AbortController();
      const timer = timeoutMs ? setTimeout(() => controller.abort(), timeoutMs) : undefined;
      try {
        for await (const _ of watch(sessionId, {
          until,
          signal: controller.signal,
          blockMs: 500,
        })) {
          // Draining the stream until the session settles.
        }
      } finally {
        if (timer) clearTimeout(timer);
      }
      // The time may run out just as the session gets where the wait was going (BLOCKED, until
      // settled): the watch's own rule says whether it did, not the timer.
      const over = !controller.signal.aborted || (await watchIsOver(sessionId, until));
      const view = await get(sessionId);
      if (!over) throw await waitTimedOut(view.session, timeoutMs ?? 0);
      return view;
    },

    consumers,
    tenants,

    async close() {
      for (const c of blockingConnections) c.disconnect();
      await queues.close();
      redis.disconnect();
    },
  };
  return client;
}

/** A request about a session (cancel, resume) as a span in the session's trace, under its submit. */
function inSessionTrace<T>(name: string, session: Session, work: () => Promise<T>): Promise<T> {
  return inSpan(
    name,
    {
      kind: SpanKind.PRODUCER,
      traceparent: session.traceparent,
      sessionId: session.id,
      attributes: { 'orq.session.id': session.id },
    },
    work,
  );
}
