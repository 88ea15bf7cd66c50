/**
 * What the client takes and gives: the zod schema of each request, which validates it where it
 * enters (client call or HTTP route), its type, and the shapes the client answers with.
 */
import { z } from 'zod';
import type { BuiltinUse } from '../../shared/domain/result.js';
import type { TaskProgress } from '../../shared/domain/progress.js';
import {
  FINISHED_SESSION_STATES,
  type Session,
  SessionState,
  SessionPriority,
  TenantId,
} from '../../shared/domain/session.js';
import { TaskId, type Task } from '../../shared/domain/task.js';
import type { PlanBreakdown } from '../../shared/domain/plan.js';
import { BudgetRaise, ResumeMode } from '../../shared/queues.js';
import { unfinishedStates } from '../../shared/rules/retention.js';
import type { WatchUntil } from '../../shared/rules/watch-end.js';
import type { SessionUsage } from '../../shared/store/usage-store.js';
import type { Counters } from '../../shared/store/session-records.js';
import { ListCursorText } from '../../shared/store/session-index.js';
import { MAX_NESTING_DEPTH, nestsDeeperThan } from '../../shared/nesting.js';
import { Instruction } from '../instruction.js';

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
