import type { ExecutorPolicy } from '../../shared/rules/executor-choice.js';
import type { SessionConfig } from '../../shared/config/schema.js';
import type { Feedback } from '../../shared/domain/refinement.js';
import type { PlanBreakdown, QualityJudgement, ReplanBreakdown } from '../../shared/domain/plan.js';
import type { Task, TaskJudgement, TaskResult, TokenUsage } from '../../shared/domain/task.js';
import type { UsageTally } from './usage-tally.js';
import type { CallEstimate } from '../../shared/budget.js';
import type { FinalJudgementInput } from '../../shared/rules/final-judgement.js';

/**
 * What each role asks of a model. Real providers (issue 4) implement this with prompts and
 * structured output; the builtin provider implements it with deterministic rules.
 */
export interface CallContext {
  sessionId: string;
  /** Aborted when the session is cancelled or the call times out. */
  signal?: AbortSignal;
  /** How many times the queue already tried this job (BullMQ attemptsMade); 0 on the first try. */
  jobAttempt?: number;
  /** Collects the call's usage for the caller to pass on (metered.ts), instead of settling it. */
  usageTally?: UsageTally;
  /**
   * Under a budget (metered.ts): reserves what a repair turn adds before it is sent, given the
   * turn's estimate and what the call spent so far; throws as the call's own reservation does.
   */
  reserveTurn?: ReserveTurn;
}

export type ReserveTurn = (turn: CallEstimate, spent: TokenUsage) => Promise<void>;

export interface PlanRequest extends CallContext {
  instruction: string;
  /** 0 for the first plan, n for the n-th replan. */
  attempt: number;
  requiredTerms: string[];
  previousPlan?: PlanBreakdown;
  /** The judge's issues and suggestions on the previous plan (seed 000). */
  feedback?: Feedback;
  config: SessionConfig;
}

export interface PlanJudgeRequest extends CallContext {
  instruction: string;
  attempt: number;
  plan: PlanBreakdown;
  requiredTerms: string[];
  /**
   * 0-based index of this call among llm.judgeSamples.k samples of one plan (sampled-judge.ts),
   * so the k requests differ: a scenario can script each sample, a recorder keys each apart.
   */
  sample?: number;
  /**
   * What the refinement decision will weigh besides this plan's score (the session's planning
   * counters), so adaptive judging can tell which scores would change it.
   */
  refinementState?: PlanRefinementState;
}

export interface PlanRefinementState {
  previousScore?: number | undefined;
  attemptCount: number;
  suggestionReplanCount: number;
}

export interface DependencyResult {
  taskId: string;
  title: string;
  output: string;
}

export interface ExecuteRequest extends CallContext {
  task: Task;
  /** 1-based execution number of this task. */
  attempt: number;
  dependencyResults: DependencyResult[];
  /** Judge feedback (continue) or a user's note (resume). */
  feedback?: string;
  instruction: string;
}

export interface TaskJudgeRequest extends CallContext {
  task: Task;
  attempt: number;
  result: TaskResult;
  instruction: string;
  /** 0-based index of this call among the opinions on one verdict (confirmTaskVerdicts). */
  sample?: number;
  /**
   * judging.checkAlreadySatisfied (issue 50): asked before the task's first execution whether
   * it is met already; `result` is empty, `attempt` 0.
   */
  beforeRun?: { dependencyResults: DependencyResult[] };
  /**
   * The final judgement of an integration round (issue 47): `task` stands for the whole
   * instruction on the result branch; the judge sees what the branch holds and its checks.
   */
  finalJudgement?: FinalJudgementInput;
}

/** Seed 001: the replanner sees the task, the worker log and the judge's verdict. */
export interface ReplanRequest extends CallContext {
  task: Task;
  result?: TaskResult;
  judgement: TaskJudgement;
  /** The replan iteration this call produces (1 for the first replan of a chain). */
  iteration: number;
  instruction: string;
  requiredTerms: string[];
  /** Which executors a subtask may name (none when absent). */
  executors?: ExecutorPolicy;
}

export interface ModelReply<T> {
  value: T;
  usage: TokenUsage;
}

/** The calls of RoleModels, each with its request. */
export interface ModelCallRequests {
  plan: PlanRequest;
  judgePlan: PlanJudgeRequest;
  execute: ExecuteRequest;
  judgeTask: TaskJudgeRequest;
  replan: ReplanRequest;
}
export type ModelCall = keyof ModelCallRequests;

export interface RoleModels {
  /** Shown in logs and history, e.g. "builtin (deterministic, not an LLM)". */
  readonly label: string;
  /**
   * What a call would send and may receive, for the budget's reservation (metered.ts); models
   * that cannot tell (the builtin provider) leave it out and budget.reserveTokensPerCall is
   * reserved instead.
   */
  estimate?<M extends ModelCall>(call: M, request: ModelCallRequests[M]): Promise<CallEstimate>;
  plan(request: PlanRequest): Promise<ModelReply<PlanBreakdown>>;
  judgePlan(request: PlanJudgeRequest): Promise<ModelReply<QualityJudgement>>;
  execute(request: ExecuteRequest): Promise<TaskResult>;
  judgeTask(request: TaskJudgeRequest): Promise<ModelReply<TaskJudgement>>;
  replan(request: ReplanRequest): Promise<ModelReply<ReplanBreakdown>>;
}
