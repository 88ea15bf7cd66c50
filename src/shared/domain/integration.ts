import { z } from 'zod';
import { IntegrationConfig } from '../config/schema.js';
import { TaskId } from './task.js';

/** How one task's commit joined the result branch. */
export const IntegratedTask = z.object({
  taskId: TaskId,
  title: z.string(),
  branch: z.string(),
  commit: z.string(),
  /**
   * merged / squashed / fast-forward: as the strategy said; contained: the result held the
   * commit already (a dependent's branch merged it in); resolved: merged after a resolver
   * command settled its conflicts.
   */
  how: z.enum(['merged', 'squashed', 'fast-forward', 'contained', 'resolved']),
  /**
   * For `contained`: the later task whose branch brings this one in (it merged this task's
   * branch, or resolved its conflict), when the result did not hold it yet.
   */
  via: TaskId.optional(),
});
export type IntegratedTask = z.infer<typeof IntegratedTask>;

/** A session check (execution.command.checks) as it ran on the result branch. */
export const IntegrationCheck = z.object({
  name: z.string(),
  mode: z.enum(['block', 'warn', 'retry']),
  passed: z.boolean(),
  exitCode: z.number().int().nullable(),
  /** The tail of its output, when it failed. */
  output: z.string().optional(),
});
export type IntegrationCheck = z.infer<typeof IntegrationCheck>;

/** A merge that stopped on conflicts no resolver covers: the files and the two tasks. */
export const IntegrationConflict = z.object({
  files: z.array(z.string()),
  /** The task whose branch could not be merged. */
  taskId: TaskId,
  title: z.string(),
  /** The task already in the result that changed those files last, when one did. */
  withTaskId: TaskId.optional(),
  withTitle: z.string().optional(),
  /** The conflicting hunks, with git's markers (`git diff` of the conflicted merge), cut short. */
  hunks: z.string().default(''),
});
export type IntegrationConflict = z.infer<typeof IntegrationConflict>;

/**
 * What one integration produced (integrate job → `integrated` event → the session record).
 * merged: the result branch holds every task and no blocking check failed; checks-failed: it
 * holds every task but a block or retry check failed on it; conflict: a task could not be
 * merged, and the result branch was not written.
 */
export const IntegrationOutcome = z.object({
  status: z.enum(['merged', 'checks-failed', 'conflict']),
  repository: z.string(),
  /** `orq/<session>/result`. */
  branch: z.string(),
  /** The result branch's commit; absent for a conflict. */
  commit: z.string().optional(),
  /** Where the result starts: baseBranch (HEAD when unset) when the integration ran. */
  baseCommit: z.string(),
  /**
   * The result branch's commit this round built on and moved (compare-and-swap): the earlier
   * round's result. Absent when the round created the branch.
   */
  previousCommit: z.string().optional(),
  strategy: IntegrationConfig.shape.strategy.unwrap(),
  tasks: z.array(IntegratedTask),
  /** `git diff --stat` of the result against its base. */
  diffStat: z.string().default(''),
  checks: z.array(IntegrationCheck).default([]),
  /** Resolver commands that ran, with the files they settled. */
  resolved: z
    .array(z.object({ files: z.array(z.string()), command: z.array(z.string()) }))
    .default([]),
  conflict: IntegrationConflict.optional(),
  /** The pull or merge request opened for the branch (integration.pullRequest). */
  pullRequest: z
    .object({ provider: z.enum(['github', 'gitlab']), url: z.string(), number: z.number().int() })
    .optional(),
});
export type IntegrationOutcome = z.infer<typeof IntegrationOutcome>;

/**
 * Where a session's integration stands (orq status, the events, the UI, /metrics):
 * merging: the integrate job merges and checks (INTEGRATING); judging: the final judge reviews
 * the result branch (INTEGRATING); resolving: a conflict-resolution task runs (RUNNING);
 * fixing: the tasks the final judge asked for run (RUNNING). Each phase of RUNNING ends in the
 * next round's merging. publishing: the final judge found the branch done, and a worker pushes
 * it and opens its pull request (INTEGRATING, with integration.pullRequest only).
 */
export const IntegrationPhase = z.enum(['merging', 'judging', 'resolving', 'fixing', 'publishing']);
export type IntegrationPhase = z.infer<typeof IntegrationPhase>;

/** The final judge's word on the integrated result (issue 47, item 3). */
export const FinalVerdict = z.object({
  round: z.number().int().min(1),
  done: z.boolean(),
  reason: z.string(),
  /** What the result still lacks, a line each: the judge's, and each blocking check failing. */
  missing: z.array(z.string()).default([]),
});
export type FinalVerdict = z.infer<typeof FinalVerdict>;

/**
 * A session's integration: asked for in `round`, with the outcome of the last round that came
 * back (kept while later rounds run, so the branch stays named) and the final judge's verdict.
 */
export const SessionIntegration = z.object({
  round: z.number().int().min(1),
  phase: IntegrationPhase.default('merging'),
  outcome: IntegrationOutcome.optional(),
  verdict: FinalVerdict.optional(),
  /** Conflict-resolution rounds so far (bounded by integration.maxResolutionRounds). */
  resolutions: z.number().int().min(0).default(0),
  /** Rounds the final judge sent back for more work (bounded by integration.maxRounds). */
  fixes: z.number().int().min(0).default(0),
});
export type SessionIntegration = z.infer<typeof SessionIntegration>;

/**
 * The pseudo task id of a session's integration in its `fences` hash (keys.ts): task ids cannot
 * hold `@`, so it meets no task's field.
 */
export const INTEGRATION_FENCE_ID = '@integration';

/** The id of the task standing for what round `round`'s final judge found missing. */
export const finalJudgementTaskId = (round: number) => `final-judgement-${round}`;
