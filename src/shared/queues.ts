import type { JobsOptions } from 'bullmq';
import { Cluster } from 'ioredis';
import { z } from 'zod';
import { BudgetConfig, type OrqConfig } from './config/schema.js';
import { PlanBreakdown, QualityJudgement, ReplanBreakdown } from './domain/plan.js';
import { Feedback } from './domain/refinement.js';
import { SessionId } from './domain/session.js';
import { TaskId, TaskJudgement, TaskResult, TokenUsage } from './domain/task.js';
import type { RedisConnection } from './redis.js';

/** One queue per role (DESIGN.md "Roles and queues"). */
export const QueueName = {
  plan: 'plan',
  judge: 'judge',
  work: 'work',
  replan: 'replan',
  coordinator: 'coordinator',
} as const;
export type QueueName = (typeof QueueName)[keyof typeof QueueName];
export const ALL_QUEUES: readonly QueueName[] = Object.values(QueueName);

export const Role = z.enum(['planner', 'judge', 'worker', 'replanner', 'coordinator']);
export type Role = z.infer<typeof Role>;

export const ROLE_QUEUE: Record<Role, QueueName> = {
  planner: 'plan',
  judge: 'judge',
  worker: 'work',
  replanner: 'replan',
  coordinator: 'coordinator',
};

const attempt = z.number().int().min(0);
const count = z.number().int().min(0);

/**
 * One model call's usage, passed on with what the call produced instead of counted at once: the
 * write that receives it counts it, once, atomically with itself (a round trip less per call).
 * Only where the call holds no budget reservation to give back (metered.ts).
 */
export const UnsettledUsage = z.object({
  role: Role.exclude(['coordinator']),
  taskId: TaskId.optional(),
  inputTokens: count,
  outputTokens: count,
  usdMicros: count,
  /** The call's model has no price in budget.prices (counted in unpriced_calls). */
  unpriced: z.boolean().optional(),
});
export type UnsettledUsage = z.infer<typeof UnsettledUsage>;

// ---- role jobs -------------------------------------------------------------

export const PlanJob = z.object({
  sessionId: SessionId,
  attempt,
  feedback: Feedback.optional(),
});
export type PlanJob = z.infer<typeof PlanJob>;

export const JudgePlanJob = z.object({
  sessionId: SessionId,
  attempt,
  plan: PlanBreakdown,
  usage: TokenUsage.optional(),
});
export type JudgePlanJob = z.infer<typeof JudgePlanJob>;

export const ExecuteJob = z.object({
  sessionId: SessionId,
  taskId: TaskId,
  attempt,
  /**
   * The task's dependencies when it was dispatched, so the worker reads their results with the
   * task in one round trip. A hint: the worker goes by the task it reads (older jobs lack it).
   */
  dependencies: z.array(TaskId).optional(),
});
export type ExecuteJob = z.infer<typeof ExecuteJob>;

export const JudgeTaskJob = z.object({
  sessionId: SessionId,
  taskId: TaskId,
  attempt,
  result: TaskResult,
  /** The execution's calls, counted by the judge's read of the task (once per job id). */
  unsettledUsage: z.array(UnsettledUsage).optional(),
});
export type JudgeTaskJob = z.infer<typeof JudgeTaskJob>;

export const ReplanJob = z.object({ sessionId: SessionId, taskId: TaskId, attempt });
export type ReplanJob = z.infer<typeof ReplanJob>;

// ---- coordinator events ----------------------------------------------------

export const PlanJudgedEvent = z.object({
  sessionId: SessionId,
  attempt,
  plan: PlanBreakdown,
  judgement: QualityJudgement,
  usage: TokenUsage.optional(),
});
export type PlanJudgedEvent = z.infer<typeof PlanJudgedEvent>;

export const TaskJudgedEvent = z.object({
  sessionId: SessionId,
  taskId: TaskId,
  attempt,
  result: TaskResult,
  judgement: TaskJudgement,
  /** The judge's calls, counted by the coordinator's write of this event (applied or ignored). */
  unsettledUsage: z.array(UnsettledUsage).optional(),
});
export type TaskJudgedEvent = z.infer<typeof TaskJudgedEvent>;

export const TaskReplannedEvent = z.object({
  sessionId: SessionId,
  taskId: TaskId,
  attempt,
  breakdown: ReplanBreakdown,
});
export type TaskReplannedEvent = z.infer<typeof TaskReplannedEvent>;

export const CancelEvent = z.object({
  sessionId: SessionId,
  reason: z.string().default('cancelled by user'),
});
export type CancelEvent = z.infer<typeof CancelEvent>;

export const ResumeMode = z.enum(['retry', 'skip', 'continue']);
export type ResumeMode = z.infer<typeof ResumeMode>;

/**
 * Higher limits for a session that stopped in BUDGET_EXHAUSTED, given with its resume: each
 * one given replaces the session's own, the others stay.
 */
export const BudgetRaise = z
  .strictObject({ maxTokens: BudgetConfig.shape.maxTokens, maxUsd: BudgetConfig.shape.maxUsd })
  .refine((b) => b.maxTokens !== undefined || b.maxUsd !== undefined, {
    message: 'give maxTokens, maxUsd or both',
  });
export type BudgetRaise = z.infer<typeof BudgetRaise>;

export const ResumeEvent = z.object({
  sessionId: SessionId,
  /** retry: run the blocked tasks again; skip: let dependents go on without them; continue: retry with the note as feedback. */
  mode: ResumeMode,
  taskIds: z.array(TaskId).optional(),
  note: z.string().optional(),
  requestId: z.string().min(1).max(100),
  /** Only for a BUDGET_EXHAUSTED session: the limits it resumes with. */
  budget: BudgetRaise.optional(),
});
export type ResumeEvent = z.infer<typeof ResumeEvent>;

/** A role job failed its last try: the coordinator records why and fails or blocks. */
export const JobFailedEvent = z.object({
  sessionId: SessionId,
  role: Role,
  taskId: TaskId.optional(),
  /** Absent only for a malformed job whose own attempt was not a valid number. */
  attempt: attempt.optional(),
  jobId: z.string(),
  error: z.string(),
  code: z.string().optional(),
  /** The job's payload did not match its schema: bad input to record, not a step of the session. */
  malformed: z.boolean().optional(),
});
export type JobFailedEvent = z.infer<typeof JobFailedEvent>;

/** Job names with their payload schemas, per queue: producers and consumers import these. */
export const JobSchemas = {
  plan: { plan: PlanJob },
  judge: { 'judge-plan': JudgePlanJob, 'judge-task': JudgeTaskJob },
  work: { execute: ExecuteJob },
  replan: { 'replan-task': ReplanJob },
  coordinator: {
    'plan-judged': PlanJudgedEvent,
    'task-judged': TaskJudgedEvent,
    'task-replanned': TaskReplannedEvent,
    cancel: CancelEvent,
    resume: ResumeEvent,
    'job-failed': JobFailedEvent,
  },
} as const satisfies Record<QueueName, Record<string, z.ZodType>>;

export type JobName<Q extends QueueName> = keyof (typeof JobSchemas)[Q] & string;
export type JobPayload<Q extends QueueName, N extends JobName<Q>> = z.infer<
  (typeof JobSchemas)[Q][N] extends z.ZodType ? (typeof JobSchemas)[Q][N] : never
>;
export type CoordinatorEventName = JobName<'coordinator'>;

/** A job to enqueue, as stored in a session outbox until it is added to its queue. */
export const OutboxJob = z.object({
  queue: z.enum(['plan', 'judge', 'work', 'replan', 'coordinator']),
  name: z.string(),
  jobId: z.string(),
  data: z.unknown(),
});
export type OutboxJob = z.infer<typeof OutboxJob>;

// ---- deterministic job ids ---------------------------------------------------
// BullMQ refuses ':' in custom ids; '|' is free because session and task ids cannot contain it.
// The same logical job always gets the same id, so a retry after a crash adds no duplicate.

export const jobIds = {
  plan: (sid: string, attempt: number) => `plan|${sid}|${attempt}`,
  judgePlan: (sid: string, attempt: number) => `judge-plan|${sid}|${attempt}`,
  execute: (sid: string, tid: string, attempt: number) => `work|${sid}|${tid}|${attempt}`,
  judgeTask: (sid: string, tid: string, attempt: number) => `judge-task|${sid}|${tid}|${attempt}`,
  replan: (sid: string, tid: string, attempt: number) => `replan|${sid}|${tid}|${attempt}`,
  planJudged: (sid: string, attempt: number) => `ev-plan-judged|${sid}|${attempt}`,
  taskJudged: (sid: string, tid: string, attempt: number) =>
    `ev-task-judged|${sid}|${tid}|${attempt}`,
  taskReplanned: (sid: string, tid: string, attempt: number) =>
    `ev-task-replanned|${sid}|${tid}|${attempt}`,
  /**
   * One per request: a cancel the coordinator ignored (it met the session stopped by its budget)
   * must not make a later cancel of the same, resumed, session a duplicate.
   */
  cancel: (sid: string, requestId: string) => `ev-cancel|${sid}|${requestId}`,
  resume: (sid: string, requestId: string) => `ev-resume|${sid}|${requestId}`,
  /** Per queue: jobs added without an id of ours get BullMQ's per-queue counter ids, 1, 2, ... */
  jobFailed: (queue: QueueName, failedJobId: string) => `ev-failed|${queue}|${failedJobId}`,
};

/** Whether a coordinator event id is a resume's (jobIds.resume). */
export const isResumeEvent = (eventId: string): boolean => eventId.startsWith('ev-resume|');

export function outboxJob<Q extends QueueName, N extends JobName<Q>>(
  queue: Q,
  name: N,
  jobId: string,
  data: JobPayload<Q, N>,
): OutboxJob {
  return { queue, name, jobId, data };
}

/** Retention and retry policy for every orq job (issue 7: memory returns to a bounded size). */
export function defaultJobOptions(queues: OrqConfig['queues']): JobsOptions {
  return {
    attempts: queues.attempts,
    backoff: { type: 'exponential', delay: queues.backoffMs },
    // Keeping completed jobs for a while keeps their ids known to BullMQ, so a late duplicate
    // add of the same deterministic id is ignored instead of running the job again.
    removeOnComplete: {
      age: queues.removeOnCompleteAgeSeconds,
      count: queues.removeOnCompleteCount,
    },
    removeOnFail: { age: queues.removeOnFailAgeSeconds },
  };
}

/**
 * BullMQ's key prefix on one Redis server: every queue under the one hash tag `{prefix}` (the
 * layout orq has always had there, so an upgrade finds the jobs already queued).
 */
export function bullPrefix(prefix: string): string {
  return `{${prefix}}`;
}

/**
 * BullMQ's key prefix for `queue` over `connection`. Every key of a queue must share one hash
 * slot (BullMQ's scripts touch many at once); on a Redis Cluster each queue gets a tag of its
 * own, `{prefix:queue}`, so the queues spread over the nodes instead of all loading one.
 */
export function queuePrefix(prefix: string, queue: QueueName, connection: RedisConnection): string {
  return connection instanceof Cluster ? `{${prefix}:${queue}}` : bullPrefix(prefix);
}
