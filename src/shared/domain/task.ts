import { z } from 'zod';

/** Task states of seed 001, plus SKIPPED (a blocked task the user chose to skip on resume). */
export const TaskState = z.enum([
  'READY',
  'RUNNING',
  'NEEDS_CONTINUATION',
  'DONE',
  'BLOCKED',
  'CANCELLED',
  'SKIPPED',
  'REPLACED_BY_REPLAN',
]);
export type TaskState = z.infer<typeof TaskState>;

/** States after which a task never runs again; a session completes when every task is in one. */
export const FINISHED_TASK_STATES: readonly TaskState[] = [
  'DONE',
  'REPLACED_BY_REPLAN',
  'SKIPPED',
  'CANCELLED',
];

/** States of a task whose execution (or continuation) is under way: dispatched, not judged. */
export const ACTIVE_TASK_STATES: readonly TaskState[] = ['RUNNING', 'NEEDS_CONTINUATION'];

/** States that let a dependent go on (SKIPPED: the user said to proceed without it). */
export const SATISFYING_TASK_STATES: readonly TaskState[] = ['DONE', 'SKIPPED'];

export const TaskId = z
  .string()
  .min(1)
  .max(200)
  .regex(/^[A-Za-z0-9_.-]+$/, 'task ids use letters, digits and _ . - only');
export type TaskId = z.infer<typeof TaskId>;

/** replanningInfo of seed 001: where a task sits in a chain of replans. */
export const ReplanningInfo = z.object({
  iteration: z.number().int().min(0),
  maxIterations: z.number().int().min(0),
  originalTaskId: TaskId.optional(),
  replacedBy: z.array(TaskId).optional(),
  replanReason: z.string().optional(),
});
export type ReplanningInfo = z.infer<typeof ReplanningInfo>;

export const TokenUsage = z.object({
  inputTokens: z.number().int().min(0).default(0),
  outputTokens: z.number().int().min(0).default(0),
});
export type TokenUsage = z.infer<typeof TokenUsage>;

export const Artifact = z.object({
  kind: z.string(),
  path: z.string().optional(),
  content: z.string().optional(),
  meta: z.record(z.string(), z.unknown()).optional(),
});
export type Artifact = z.infer<typeof Artifact>;

/** What a Worker returns for one execution of a task. */
export const TaskResult = z.object({
  output: z.string(),
  log: z.string().default(''),
  artifacts: z.array(Artifact).default([]),
  tokenUsage: TokenUsage.default({ inputTokens: 0, outputTokens: 0 }),
  durationMs: z.number().min(0).default(0),
  error: z.string().optional(),
});
export type TaskResult = z.infer<typeof TaskResult>;

const TaskJudgementFields = z.object({
  success: z.boolean(),
  shouldContinue: z.boolean(),
  shouldReplan: z.boolean(),
  reason: z.string().default(''),
  missingRequirements: z.array(z.string()).default([]),
  /**
   * The acceptance was met before this execution: the repository or earlier tasks already did
   * it (issue 50, from the seeds' origin). The task is SKIPPED, its dependents go on. Only with
   * `success`: "already done" with a failure is no verdict, and is refused.
   */
  alreadySatisfied: z.boolean().optional(),
  /**
   * With a blocked verdict: what the task needs from a person (information only they have). The
   * session shows it as a question; the answer runs the task again with it (issue 48).
   */
  question: z.string().trim().min(1).max(4_000).optional(),
});

/** alreadySatisfied goes with success only: any other combination is a bad verdict. */
const satisfiedOnlyWithSuccess = (judgement: { success: boolean; alreadySatisfied?: boolean }) =>
  !judgement.alreadySatisfied || judgement.success;
const SATISFIED_ONLY_WITH_SUCCESS = {
  message: 'alreadySatisfied: true goes with success: true only (the task is met already)',
  path: ['alreadySatisfied'],
};

/**
 * What the task judge (a model) answers on one execution (seed 001's three-way judgement). Both
 * flags are required: a failed verdict without them is a repair turn, so BLOCKED (all three
 * false) means the judge said so, not that it left the flags out.
 */
export const TaskJudgementAnswer = TaskJudgementFields.refine(
  satisfiedOnlyWithSuccess,
  SATISFIED_ONLY_WITH_SUCCESS,
);
export type TaskJudgementAnswer = z.infer<typeof TaskJudgementAnswer>;

/**
 * A task verdict as orq keeps it. The flags default to false for orq's own fakes (scenario
 * files, the builtin models) and for records stored before the answer required them.
 */
export const TaskJudgement = TaskJudgementFields.extend({
  shouldContinue: z.boolean().default(false),
  shouldReplan: z.boolean().default(false),
  /**
   * With llm.judgeSamples.confirmTaskVerdicts: every verdict asked for (in call order) and why
   * the one kept was kept. Absent when one call decided.
   */
  confirmation: z
    .object({
      verdicts: z.array(z.enum(['done', 'continue', 'replan', 'blocked'])),
      reason: z.string(),
    })
    .optional(),
}).refine(satisfiedOnlyWithSuccess, SATISFIED_ONLY_WITH_SUCCESS);

export type TaskJudgement = z.infer<typeof TaskJudgement>;

export const Task = z.object({
  id: TaskId,
  title: z.string().min(1),
  acceptance: z.string(),
  context: z.string().default(''),
  scopePaths: z.array(z.string()).default([]),
  dependencies: z.array(TaskId).default([]),
  state: TaskState.default('READY'),
  /** Executions started so far (first run, continuations and resumes). */
  attempts: z.number().int().min(0).default(0),
  /** Times the Judge said "continue" for this task. */
  continuations: z.number().int().min(0).default(0),
  replanningInfo: ReplanningInfo.optional(),
  /** Feedback for the next execution: the judge's reason on continue, or a user's note on resume. */
  feedback: z.string().optional(),
  result: TaskResult.optional(),
  judgement: TaskJudgement.optional(),
  /** Executor name for the worker (issue 5); the session's default when absent. */
  executor: z.string().optional(),
  /** Tasks that depend on this one: completion touches only these (O(out-degree) scheduling). */
  dependents: z.array(TaskId).default([]),
  /** Dependencies not yet satisfied; the coordinator dispatches the task when this reaches 0. */
  pendingDependencies: z.number().int().min(0).default(0),
  /**
   * judging.checkAlreadySatisfied: the judge was asked before the first execution (issue 50);
   * the task then runs, or is SKIPPED when the judge found it met already. Absent: not asked.
   */
  checkedBeforeRun: z.boolean().optional(),
  /**
   * The execution `attempt` was resumed after its step wait `waitId` (issue 48): its work job
   * now is jobIds.resumeExecute's, which status views read for its progress.
   */
  resumedAfter: z
    .object({ attempt: z.number().int().min(1), waitId: z.string().min(1) })
    .optional(),
  /** The judge said replan and the Replanner has been asked for subtasks. */
  replanPending: z.boolean().default(false),
  /** While BLOCKED: why (the reason of the change to BLOCKED), for status views. */
  blockedReason: z.string().optional(),
  /**
   * Tasks in the longest chain of dependents behind this one, itself included (critical-path.ts):
   * among ready tasks, the longest goes to a worker first. Absent on tasks stored before.
   */
  criticalPath: z.number().int().min(1).optional(),
  /** When its latest execution was dispatched (ISO time), for status views' elapsed times. */
  startedAt: z.string().optional(),
  /** When it last stopped running (judged done, blocked, cancelled, ...); absent while it runs. */
  endedAt: z.string().optional(),
});
export type Task = z.infer<typeof Task>;
/** Input form: defaults may be omitted. */
export type TaskInput = z.input<typeof Task>;

/**
 * A task whose current execution is under way: dispatched (RUNNING, or NEEDS_CONTINUATION for
 * a continuation), not yet judged, and not waiting for its replan.
 */
export function isExecuting(task: Pick<Task, 'state' | 'replanPending'>): boolean {
  return ACTIVE_TASK_STATES.includes(task.state) && !task.replanPending;
}

/**
 * A task that may run but has not been dispatched: READY with no dependency left. It waits in
 * its session's ready set for a slot (scheduling.maxTasksInFlight).
 */
export function isWaitingForSlot(task: Pick<Task, 'state' | 'pendingDependencies'>): boolean {
  return task.state === 'READY' && task.pendingDependencies === 0;
}
