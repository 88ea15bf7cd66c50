import type { JobsOptions } from 'bullmq';
import { Cluster } from 'ioredis';
import { z } from 'zod';
import { BudgetConfig, type OrqConfig } from './config/schema.js';
import { PlanBreakdown, QualityJudgement, ReplanBreakdown } from './domain/plan.js';
import { Feedback } from './domain/refinement.js';
import { IntegrationOutcome } from './domain/integration.js';
import { SessionId } from './domain/session.js';
import { Answerer, HumanWaitKind, StepDecision, WaitAnswer, WaitId } from './domain/human-wait.js';
import { ReplanningInfo, TaskId, TaskJudgement, TaskResult, TokenUsage } from './domain/task.js';
import type { RedisConnection } from './redis.js';
import { withTraceparent } from './tracing/trace.js';

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
 * The W3C traceparent of the span that enqueued the job (tracing/trace.ts), so its processing
 * on any pod joins the session's trace; absent when tracing is off.
 */
const traceparent = z.string().max(64).optional();
/**
 * The fence the work delivery that ran the task took (keys.ts `fences`), passed on from its
 * result to the verdict: the coordinator refuses a verdict on a delivery that a later one of the
 * same job has superseded. Older jobs lack it: not checked.
 */
const fence = z.number().int().min(1).optional();

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
  traceparent,
  attempt,
  feedback: Feedback.optional(),
});
export type PlanJob = z.infer<typeof PlanJob>;

export const JudgePlanJob = z.object({
  sessionId: SessionId,
  traceparent,
  attempt,
  plan: PlanBreakdown,
  usage: TokenUsage.optional(),
});
export type JudgePlanJob = z.infer<typeof JudgePlanJob>;

/**
 * A dependency's result as a task job carries it: its output when short (DEPENDENCY_OUTPUT_INLINE
 * bytes at most), else only a reference (no `output`), which the worker reads from the store.
 */
export const DependencyRef = z.object({
  taskId: TaskId,
  title: z.string(),
  /** Absent: the output was too long to copy; read it from the task's record. */
  output: z.string().optional(),
});
export type DependencyRef = z.infer<typeof DependencyRef>;

/**
 * The task as it was when a work, task-judge or replan job was created (issue 40): what the job
 * is about, for a person in Bull Board and for the role, which acts on it without reading the
 * task again while the task's version in the store is still `version`. The store stays the
 * truth: a changed version sends the role back to the record (task-card.ts).
 */
export const TaskCard = z.object({
  id: TaskId,
  title: z.string(),
  attempt,
  /** The task's version in the store once the job's own write landed (taskVersions). */
  version: z.number().int().min(1),
  replanningInfo: ReplanningInfo.optional(),
  /** Judge feedback for a continuation, or a user's note on a resume. */
  feedback: z.string().optional(),
  /**
   * What the task asks, when it fits TASK_BODY_INLINE bytes; absent for a longer one, which the
   * role reads from the store (the card still names the task).
   */
  body: z
    .object({
      acceptance: z.string(),
      context: z.string().default(''),
      scopePaths: z.array(z.string()).default([]),
      executor: z.string().optional(),
    })
    .optional(),
  /** Its dependencies in order, with their outputs or references to them. */
  dependencies: z.array(DependencyRef).default([]),
});
export type TaskCard = z.infer<typeof TaskCard>;

export const ExecuteJob = z.object({
  sessionId: SessionId,
  traceparent,
  taskId: TaskId,
  attempt,
  /**
   * The task's dependencies when it was dispatched, so the worker reads their results with the
   * task in one round trip. A hint: the worker goes by the task it reads (older jobs lack it).
   */
  dependencies: z.array(TaskId).optional(),
  /** The job's fair-release tag (fair-release.ts): the worker that takes it moves V up to it. */
  fairTag: z.number().optional(),
  /** Tasks on the longest chain through it: ranks its model calls at a quota's line. */
  criticalPath: z.number().int().min(1).optional(),
  /** Its session's tenant, for the tenant's cap (tenant-cap.ts; older jobs lack it: default). */
  tenant: z.string().optional(),
  /** The task as dispatched (older jobs lack it: the worker reads the task). */
  task: TaskCard.optional(),
  /**
   * A person ended the execution's step wait (issue 48): the same execution resumes from its
   * recorded steps, and its step `resume.step` runs (approved) or hears the rejection or answer.
   */
  resume: StepDecision.optional(),
});
export type ExecuteJob = z.infer<typeof ExecuteJob>;

/** What a running execution waits for a person about (the executor's pause, ExecutionPause). */
export const StepRequest = z.discriminatedUnion('kind', [
  z.object({
    kind: z.literal('step-approval'),
    step: z.number().int().min(0),
    tool: z.string().min(1),
    input: z.unknown(),
    command: z.string().optional(),
    rule: z.string(),
  }),
  z.object({
    kind: z.literal('question'),
    step: z.number().int().min(0),
    question: z.string().trim().min(1).max(20_000),
  }),
]);
export type StepRequest = z.infer<typeof StepRequest>;

/**
 * An execution's result as a judge job or verdict event carries it: the result itself when it
 * fits TASK_BODY_INLINE bytes as JSON (task-card.ts inlineResult), so Bull Board shows it; a
 * longer one only as `storedResult`, the worker having stored it (SessionStore.putResult) for
 * the judge and the coordinator to read. One of the two is always there.
 */
const executionResult = {
  result: TaskResult.optional(),
  /** The result was too long to copy: read it from the session's `results` hash. */
  storedResult: z.literal(true).optional(),
};
const hasResult = [
  (d: { result?: unknown; storedResult?: true }) =>
    d.result !== undefined || d.storedResult === true,
  { message: 'give result, or storedResult: true for a result the worker stored' },
] as const;

export const JudgeTaskJob = z
  .object({
    sessionId: SessionId,
    traceparent,
    taskId: TaskId,
    attempt,
    ...executionResult,
    /** The execution's calls, counted by the judge's read of the task (once per job id). */
    unsettledUsage: z.array(UnsettledUsage).optional(),
    /** The task as its worker ran it (older jobs lack it: the judge reads the task). */
    task: TaskCard.optional(),
    fence,
  })
  .refine(...hasResult);
export type JudgeTaskJob = z.infer<typeof JudgeTaskJob>;

/**
 * judging.checkAlreadySatisfied (issue 50): before a task's first execution, the judge is asked
 * whether the task is met already. Sent in place of its first work job.
 */
export const CheckTaskJob = z.object({
  sessionId: SessionId,
  traceparent,
  taskId: TaskId,
  /**
   * The execution attempt the check comes before (1): its final failure names it, so the task
   * is blocked rather than left waiting for an answer that never comes. Older jobs lack it.
   */
  attempt: attempt.optional(),
  /** The task as dispatched, with its dependencies' outputs (older jobs lack it: read). */
  task: TaskCard.optional(),
});
export type CheckTaskJob = z.infer<typeof CheckTaskJob>;

export const ReplanJob = z.object({
  sessionId: SessionId,
  taskId: TaskId,
  attempt,
  /** The task as judged (older jobs lack it: the replanner reads the task). */
  task: TaskCard.optional(),
  /** The verdict that asked for the replan. */
  judgement: TaskJudgement.optional(),
  /** The execution's result, when short enough to copy (TASK_BODY_INLINE); else read. */
  result: TaskResult.optional(),
  traceparent,
});
export type ReplanJob = z.infer<typeof ReplanJob>;

/**
 * Merge a finished session's task branches into its result branch and run its checks there
 * (workers/integration). On the work queue: worker pods have the repository.
 */
export const IntegrateJob = z.object({
  sessionId: SessionId,
  traceparent,
  /** Which integration of the session this is (1 for the first). */
  round: z.number().int().min(1),
  /**
   * Not a merge: push the round's result branch, which the final judge found done, and open its
   * pull request (integration.pullRequest), handing on a `published` event.
   */
  publish: z.literal(true).optional(),
});
export type IntegrateJob = z.infer<typeof IntegrateJob>;

/**
 * The final judgement of an integration round (issue 47): the judge reviews the result branch
 * (the instruction, the required terms, the diff stat, the checks) and says done or what is
 * missing.
 */
export const JudgeResultJob = z.object({
  sessionId: SessionId,
  traceparent,
  round: z.number().int().min(1),
});
export type JudgeResultJob = z.infer<typeof JudgeResultJob>;

// ---- coordinator events ----------------------------------------------------

export const PlanJudgedEvent = z.object({
  sessionId: SessionId,
  traceparent,
  attempt,
  plan: PlanBreakdown,
  judgement: QualityJudgement,
  usage: TokenUsage.optional(),
});
export type PlanJudgedEvent = z.infer<typeof PlanJudgedEvent>;

export const TaskJudgedEvent = z
  .object({
    sessionId: SessionId,
    traceparent,
    taskId: TaskId,
    attempt,
    ...executionResult,
    judgement: TaskJudgement,
    /** The judge's calls, counted by the coordinator's write of this event (applied or ignored). */
    unsettledUsage: z.array(UnsettledUsage).optional(),
    fence,
  })
  .refine(...hasResult);
export type TaskJudgedEvent = z.infer<typeof TaskJudgedEvent>;

/** The judge's answer to a CheckTaskJob: skip the task (alreadySatisfied) or run it. */
export const TaskCheckedEvent = z.object({
  sessionId: SessionId,
  traceparent,
  taskId: TaskId,
  /** The check job's attempt, passed on so this event's own final failure blocks the task. */
  attempt: attempt.optional(),
  judgement: TaskJudgement,
  /** The judge's calls, counted by the coordinator's write of this event (applied or ignored). */
  unsettledUsage: z.array(UnsettledUsage).optional(),
});
export type TaskCheckedEvent = z.infer<typeof TaskCheckedEvent>;

export const TaskReplannedEvent = z.object({
  sessionId: SessionId,
  traceparent,
  taskId: TaskId,
  attempt,
  breakdown: ReplanBreakdown,
});
export type TaskReplannedEvent = z.infer<typeof TaskReplannedEvent>;

export const CancelEvent = z.object({
  sessionId: SessionId,
  traceparent,
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
  traceparent,
  /** retry: run the blocked tasks again; skip: let dependents go on without them; continue: retry with the note as feedback. */
  mode: ResumeMode,
  taskIds: z.array(TaskId).optional(),
  note: z.string().optional(),
  requestId: z.string().min(1).max(100),
  /** Only for a BUDGET_EXHAUSTED session: the limits it resumes with. */
  budget: BudgetRaise.optional(),
});
export type ResumeEvent = z.infer<typeof ResumeEvent>;

/**
 * A person's answer to the wait `waitId` (issue 48). The wait id fences it: an answer to a wait
 * that is no longer open (answered already, timed out, a later plan's) changes nothing.
 */
export const AnswerEvent = z.object({
  sessionId: SessionId,
  traceparent,
  waitId: WaitId,
  requestId: z.string().min(1).max(100),
  answer: WaitAnswer,
  by: Answerer.optional(),
});
export type AnswerEvent = z.infer<typeof AnswerEvent>;

/**
 * A running execution stopped at a step that needs a person (approval.steps, or an agent's
 * ask_human) and its work job ended: the coordinator opens the wait. Sent by the worker; the
 * step is in the execution's journal already, so a redelivery sends the same event (same id).
 */
export const StepWaitingEvent = z.object({
  sessionId: SessionId,
  traceparent,
  taskId: TaskId,
  attempt,
  request: StepRequest,
});
export type StepWaitingEvent = z.infer<typeof StepWaitingEvent>;

/**
 * The delayed end of a wait with approval.timeoutSeconds (a plan's: it acts as approval.onTimeout
 * says) or approval.stepTimeoutSeconds (a running execution's: approval.onStepTimeout).
 */
export const WaitTimedOutEvent = z.object({
  sessionId: SessionId,
  traceparent,
  waitId: WaitId,
});
export type WaitTimedOutEvent = z.infer<typeof WaitTimedOutEvent>;

/**
 * A session started or stopped waiting for a person: posted to notifications.webhook by a
 * coordinator, retried with backoff (webhook.ts). The job carries what is posted.
 */
export const NotifyJob = z.object({
  sessionId: SessionId,
  traceparent,
  event: z.enum(['wait.opened', 'wait.closed']),
  waitId: WaitId,
  kind: HumanWaitKind,
  /** How it closed: answered (with the action) or timed out. */
  outcome: z.string().optional(),
  state: z.string(),
  at: z.string(),
  /** Which try of the delivery this is (a failed one queues the next, webhook.ts). */
  attempt: z.number().int().min(1).default(1),
  /** The first try's job id, the same on every try: receivers deduplicate on it. */
  deliveryId: z.string().optional(),
});
export type NotifyJob = z.infer<typeof NotifyJob>;

/** An integration's outcome, from the delivery of the integrate job that holds its fence. */
export const IntegratedEvent = z.object({
  sessionId: SessionId,
  traceparent,
  round: z.number().int().min(1),
  outcome: IntegrationOutcome,
  fence,
});
export type IntegratedEvent = z.infer<typeof IntegratedEvent>;

/** The pull request of a round's result branch, opened once the final judge found it done. */
export const PublishedEvent = z.object({
  sessionId: SessionId,
  traceparent,
  round: z.number().int().min(1),
  pullRequest: IntegrationOutcome.shape.pullRequest.unwrap(),
});
export type PublishedEvent = z.infer<typeof PublishedEvent>;

/** The final judge's verdict on an integration round's result branch. */
export const ResultJudgedEvent = z.object({
  sessionId: SessionId,
  traceparent,
  round: z.number().int().min(1),
  judgement: TaskJudgement,
  /** The judge's calls, counted by the coordinator's write of this event (applied or ignored). */
  unsettledUsage: z.array(UnsettledUsage).optional(),
});
export type ResultJudgedEvent = z.infer<typeof ResultJudgedEvent>;

/** A role job failed its last try: the coordinator records why and fails or blocks. */
export const JobFailedEvent = z.object({
  sessionId: SessionId,
  traceparent,
  role: Role,
  taskId: TaskId.optional(),
  /** Absent only for a malformed job whose own attempt was not a valid number. */
  attempt: attempt.optional(),
  jobId: z.string(),
  error: z.string(),
  code: z.string().optional(),
  /** The job's payload did not match its schema: bad input to record, not a step of the session. */
  malformed: z.boolean().optional(),
  /** The wait a failed answer or wait-timed-out event was for: it stays open (wait-failures.ts). */
  waitId: WaitId.optional(),
});
export type JobFailedEvent = z.infer<typeof JobFailedEvent>;

/** Job names with their payload schemas, per queue: producers and consumers import these. */
export const JobSchemas = {
  plan: { plan: PlanJob },
  judge: {
    'judge-plan': JudgePlanJob,
    'judge-task': JudgeTaskJob,
    'check-task': CheckTaskJob,
    'judge-result': JudgeResultJob,
  },
  work: { execute: ExecuteJob, integrate: IntegrateJob },
  replan: { 'replan-task': ReplanJob },
  coordinator: {
    'plan-judged': PlanJudgedEvent,
    'task-judged': TaskJudgedEvent,
    'task-checked': TaskCheckedEvent,
    'task-replanned': TaskReplannedEvent,
    cancel: CancelEvent,
    resume: ResumeEvent,
    'job-failed': JobFailedEvent,
    integrated: IntegratedEvent,
    'result-judged': ResultJudgedEvent,
    published: PublishedEvent,
    answer: AnswerEvent,
    'wait-timed-out': WaitTimedOutEvent,
    'step-waiting': StepWaitingEvent,
    /** Not an event: a webhook delivery, taken by the coordinator's pods (webhook.ts). */
    notify: NotifyJob,
  },
} as const satisfies Record<QueueName, Record<string, z.ZodType>>;

/**
 * A job's kind: its name's first word. Task jobs are named for a person reading Bull Board,
 * `execute t4 "Write parser" #2`; roles route on the kind, so the older bare names still work.
 */
export function jobKind(name: string): string {
  const space = name.indexOf(' ');
  return space < 0 ? name : name.slice(0, space);
}

/** Title characters a job name keeps. */
const NAME_TITLE_CHARS = 60;

/** The name of a task job: its kind, the task's id, its title (cut short) and the attempt. */
export function taskJobName(kind: string, task: { id: string; title: string; attempt: number }) {
  const title =
    task.title.length > NAME_TITLE_CHARS
      ? `${task.title.slice(0, NAME_TITLE_CHARS - 1)}…`
      : task.title;
  return `${kind} ${task.id} ${JSON.stringify(title)} #${task.attempt}`;
}

export type JobName<Q extends QueueName> = keyof (typeof JobSchemas)[Q] & string;
export type JobPayload<Q extends QueueName, N extends JobName<Q>> = z.infer<
  (typeof JobSchemas)[Q][N] extends z.ZodType ? (typeof JobSchemas)[Q][N] : never
>;
export type CoordinatorEventName = Exclude<JobName<'coordinator'>, 'notify'>;

/** A job to enqueue, as stored in a session outbox until it is added to its queue. */
export const OutboxJob = z.object({
  queue: z.enum(['plan', 'judge', 'work', 'replan', 'coordinator']),
  name: z.string(),
  jobId: z.string(),
  data: z.unknown(),
  /** The BullMQ priority number to add the job with (fair-release.ts); none: BullMQ's 0. */
  priority: z
    .number()
    .int()
    .min(1)
    .max(2 ** 21 - 1)
    .optional(),
  /**
   * A work job released fairly: its number is its session priority's band plus its lead in
   * start-time fair queuing, computed when it is added (QueueSet.addAll).
   */
  fairShare: z
    .object({
      tenant: z.string(),
      priority: z.number().int().min(1).max(9),
      criticalPath: z.number().int().min(1).optional(),
    })
    .optional(),
  /** Not to run before this time (epoch ms): added delayed by what is left of it. */
  notBefore: z.number().int().min(0).optional(),
  /** Tries and backoff of its own, instead of the queue's (a webhook's delivery). */
  retry: z
    .object({ attempts: z.number().int().min(1), backoffMs: z.number().int().min(1) })
    .optional(),
});
export type OutboxJob = z.infer<typeof OutboxJob>;

// ---- deterministic job ids ---------------------------------------------------
// BullMQ refuses ':' in custom ids; '|' is free because session and task ids cannot contain it.
// The same logical job always gets the same id, so a retry after a crash adds no duplicate.

/** What names a later work delivery's hand-offs and stored result: none for the first. */
export const fenceSuffix = (fence: number | undefined) => (fence && fence > 1 ? `|f${fence}` : '');

export const jobIds = {
  plan: (sid: string, attempt: number) => `plan|${sid}|${attempt}`,
  judgePlan: (sid: string, attempt: number) => `judge-plan|${sid}|${attempt}`,
  execute: (sid: string, tid: string, attempt: number) => `work|${sid}|${tid}|${attempt}`,
  /** The work job that resumes an execution once its step wait `waitId` ended. */
  resumeExecute: (sid: string, tid: string, attempt: number, waitId: string) =>
    `work|${sid}|${tid}|${attempt}|${waitId}`,
  stepWaiting: (sid: string, tid: string, attempt: number, step: number) =>
    `ev-step-waiting|${sid}|${tid}|${attempt}|${step}`,
  /**
   * The hand-off of one work delivery, by the fence it took (keys.ts `fences`): a later
   * delivery's result must not be dropped as a duplicate of a superseded one's, which the
   * coordinator refuses. The first delivery's (fence 1, or none) keeps the plain id.
   */
  judgeTask: (sid: string, tid: string, attempt: number, fence?: number) =>
    `judge-task|${sid}|${tid}|${attempt}${fenceSuffix(fence)}`,
  /** Once per task: only its first execution is checked (judging.checkAlreadySatisfied). */
  checkTask: (sid: string, tid: string) => `check-task|${sid}|${tid}`,
  taskChecked: (sid: string, tid: string) => `ev-task-checked|${sid}|${tid}`,
  replan: (sid: string, tid: string, attempt: number) => `replan|${sid}|${tid}|${attempt}`,
  planJudged: (sid: string, attempt: number) => `ev-plan-judged|${sid}|${attempt}`,
  taskJudged: (sid: string, tid: string, attempt: number, fence?: number) =>
    `ev-task-judged|${sid}|${tid}|${attempt}${fenceSuffix(fence)}`,
  taskReplanned: (sid: string, tid: string, attempt: number) =>
    `ev-task-replanned|${sid}|${tid}|${attempt}`,
  /**
   * One per request: a cancel the coordinator ignored (it met the session stopped by its budget)
   * must not make a later cancel of the same, resumed, session a duplicate.
   */
  cancel: (sid: string, requestId: string) => `ev-cancel|${sid}|${requestId}`,
  resume: (sid: string, requestId: string) => `ev-resume|${sid}|${requestId}`,
  integrate: (sid: string, round: number) => `integrate|${sid}|${round}`,
  /** Per delivery of the integrate job, like taskJudged: a superseded one's must not hide it. */
  integrated: (sid: string, round: number, fence?: number) =>
    `ev-integrated|${sid}|${round}${fenceSuffix(fence)}`,
  judgeResult: (sid: string, round: number) => `judge-result|${sid}|${round}`,
  resultJudged: (sid: string, round: number) => `ev-result-judged|${sid}|${round}`,
  /** The pull request of a round the final judge found done (an integrate job with publish). */
  publish: (sid: string, round: number) => `publish|${sid}|${round}`,
  published: (sid: string, round: number) => `ev-published|${sid}|${round}`,
  /** One per answer given (several may race for one wait; the first applied wins). */
  answer: (sid: string, requestId: string) => `ev-answer|${sid}|${requestId}`,
  waitTimedOut: (sid: string, waitId: string) => `ev-wait-timed-out|${sid}|${waitId}`,
  /** One per wait and event, so a redelivered transition posts it once. */
  notify: (sid: string, waitId: string, event: string) => `notify|${sid}|${waitId}|${event}`,
  /** Per queue: jobs added without an id of ours get BullMQ's per-queue counter ids, 1, 2, ... */
  jobFailed: (queue: QueueName, failedJobId: string) => `ev-failed|${queue}|${failedJobId}`,
};

/** Whether a coordinator event id is a person's answer (jobIds.answer). */
export const isAnswerEvent = (eventId: string): boolean => eventId.startsWith('ev-answer|');

/** Whether a coordinator event id is a resume's (jobIds.resume). */
export const isResumeEvent = (eventId: string): boolean => eventId.startsWith('ev-resume|');

/** `next`, added with the BullMQ priority of `job`, the job whose step produced it. */
export function withPriorityOf(job: { opts: { priority?: number } }, next: OutboxJob): OutboxJob {
  return job.opts.priority ? { ...next, priority: job.opts.priority } : next;
}

/** A job for the outbox; a task job named for its task when `data` carries the task's card. */
export function outboxJob<Q extends QueueName, N extends JobName<Q>>(
  queue: Q,
  name: N,
  jobId: string,
  data: JobPayload<Q, N>,
): OutboxJob {
  const card = (data as { task?: TaskCard }).task;
  return {
    queue,
    name: card ? taskJobName(name, card) : name,
    jobId,
    data: withTraceparent(data as object),
  };
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
