import type { LlmRoleConfig } from '../../shared/config/schema.js';
import type { UsageTally } from '../llm/usage-tally.js';
import type { HistoryEntryDraft } from '../../shared/domain/history.js';
import type { ProgressUpdate } from '../../shared/domain/progress.js';
import type { Session } from '../../shared/domain/session.js';
import type { Task, TaskResult } from '../../shared/domain/task.js';
import type { ChatProvider } from '../llm/chat.js';
import type { DependencyResult, RoleModels } from '../llm/types.js';
import type { Logger } from '../../shared/logger.js';
import type { TaskStepRecord } from '../../shared/store/session-records.js';
import type { StepDecision } from '../../shared/domain/human-wait.js';
import type { StepRequest } from '../../shared/queues.js';

/**
 * The steps of one execution attempt in the session history (seed 004's plan, action,
 * reflection and revision lines). Only the coordinator writes state; these entries are the one
 * exception, appended exactly once per step so a redelivered job adds no duplicate.
 */
export interface StepHistory {
  /**
   * Appends step `step` (0, 1, 2...); `plan` is the plan in force after a plan or revision.
   * GONE: the session was deleted meanwhile (nothing written; its end aborts the run).
   */
  append(
    step: number,
    entry: HistoryEntryDraft,
    plan?: unknown,
  ): Promise<'OK' | 'DUPLICATE' | 'GONE'>;
  /** What earlier deliveries of this attempt recorded, in step order. */
  load(): Promise<TaskStepRecord[]>;
}

/** Everything an executor needs to carry out one execution of a task. */
export interface ExecutorContext {
  session: Session;
  task: Task;
  /** 1-based execution number of the task. */
  attempt: number;
  dependencyResults: DependencyResult[];
  /** The judge's feedback (continue) or a user's note (resume). */
  feedback?: string;
  /** The worker role's models for this session, metered already. */
  models: RoleModels;
  /** Passed with each call of `models`: the worker hands the usage on with the result. */
  usageTally?: UsageTally;
  /**
   * Wraps a ChatProvider the executor builds itself, so its calls are counted per session,
   * role and task and reserved against the budget like `models` (BUDGET_EXHAUSTED when refused).
   */
  meterChat(provider: ChatProvider): ChatProvider;
  /**
   * Puts a ChatProvider the executor builds itself under its config's rateLimit, the provider
   * quota shared by every pod (issue 33); absent where no quotas are enforced (tests).
   */
  limitChat?(provider: ChatProvider, config: LlmRoleConfig): ChatProvider;
  history: StepHistory;
  /**
   * Tells what a long execution is doing (its work job's progress: Bull Board, `orq status`).
   * Best effort and not awaited: a report that cannot be stored changes nothing.
   */
  progress(update: ProgressUpdate): void;
  /**
   * Aborted when the job is cancelled or the session finishes (cancelled, failed, out of
   * budget); executors stop their loops, processes and calls.
   */
  signal: AbortSignal;
  /**
   * Resolves while this delivery still holds its job, and throws (DELIVERY_LOST) once the job
   * may be another pod's: its lock lapsed while the process was paused or cut off (issue 35).
   * Call it right before each side effect (a process, a commit): the check at the job's start
   * ran before a set-up that can take seconds. Absent where no lock is held (tests).
   */
  confirmCurrent?(): Promise<void>;
  /** Child logger with sessionId, taskId and executor bound. */
  logger: Logger;
  /** BullMQ attemptsMade of the job: 0 on the first delivery. */
  jobAttempt: number;
  /**
   * A person's decision on the step this execution waited at (issue 48): the work job that
   * resumes it carries it. The executor applies it to the recorded step it names.
   */
  stepDecision?: StepDecision;
}

/**
 * Thrown by an executor that stopped at a step needing a person (approval.steps, ask_human):
 * the step is recorded in its journal already. The worker hands the request to the coordinator,
 * which opens the wait, and ends the job; the person's decision resumes the same execution
 * (ExecutorContext.stepDecision). Not a failure: no retry, no attempt used.
 */
export class ExecutionPaused extends Error {
  constructor(readonly request: StepRequest) {
    super(
      request.kind === 'question'
        ? `the execution waits for a person's answer (step ${request.step})`
        : `the execution waits for a person to approve ${request.tool} (step ${request.step})`,
    );
    this.name = 'ExecutionPaused';
  }
}

/** A way of doing a task's work: one model call, an agent with tools, or a coding-agent CLI. */
export interface Executor {
  readonly name: string;
  execute(ctx: ExecutorContext): Promise<TaskResult>;
}
