import { z } from 'zod';
import type { ExecutionConfig, ReplanningConfig } from '../config/schema.js';
import type { Task, TaskJudgement } from '../domain/task.js';

/** Why a task ended up BLOCKED, so `orq history` can say which limit or verdict stopped it. */
export const TaskBlockedCause = z.enum([
  'judge_blocked',
  'max_continuations',
  'max_replan_iterations',
  'replanning_disabled',
]);
export type TaskBlockedCause = z.infer<typeof TaskBlockedCause>;

/** What the coordinator does with a task after the Judge's verdict (seed 001). */
export const TaskOutcome = z.discriminatedUnion('kind', [
  z.object({ kind: z.literal('done'), reason: z.string() }),
  /** The judge found the acceptance met before the execution (issue 50): SKIPPED, not DONE. */
  z.object({ kind: z.literal('satisfied'), reason: z.string() }),
  z.object({
    kind: z.literal('continue'),
    reason: z.string(),
    /** Stored on the task and handed to the next execution. */
    feedback: z.string(),
    /** The task's `continuations` after this one is counted. */
    nextContinuations: z.number().int().min(1),
  }),
  z.object({
    kind: z.literal('replan'),
    reason: z.string(),
    /** replanningInfo.iteration the Replanner's subtasks will carry. */
    nextIteration: z.number().int().min(1),
  }),
  z.object({ kind: z.literal('blocked'), reason: z.string(), cause: TaskBlockedCause }),
]);
export type TaskOutcome = z.infer<typeof TaskOutcome>;

export interface DecideTaskOutcomeInput {
  judgement: TaskJudgement;
  task: Pick<Task, 'continuations' | 'replanningInfo'>;
  replanning: ReplanningConfig;
  execution: ExecutionConfig;
}

/**
 * The replan limit that applies to a task: the one its chain started with (stored in
 * replanningInfo when the first replan created it), else the configured one. A chain keeps
 * its limit even if the configuration changes while the session runs.
 */
export function effectiveMaxReplanIterations(
  task: Pick<Task, 'replanningInfo'>,
  replanning: Pick<ReplanningConfig, 'maxIterations'>,
): number {
  return task.replanningInfo?.maxIterations ?? replanning.maxIterations;
}

type ReplanCheck =
  | { possible: true; nextIteration: number; maxIterations: number }
  | {
      possible: false;
      cause: 'replanning_disabled' | 'max_replan_iterations';
      nextIteration: number;
      maxIterations: number;
    };

/**
 * Seed 001: `if (newIteration >= maxReplanIterations) markTaskAsBlocked`. The iteration counts
 * replans along one chain (a task the Planner made is iteration 0), so with maxIterations 3
 * tasks at iterations 0 and 1 may be replanned and a task at iteration 2 is blocked instead.
 */
function checkReplan(
  task: Pick<Task, 'replanningInfo'>,
  replanning: ReplanningConfig,
): ReplanCheck {
  const nextIteration = (task.replanningInfo?.iteration ?? 0) + 1;
  const maxIterations = effectiveMaxReplanIterations(task, replanning);
  if (!replanning.enabled) {
    return { possible: false, cause: 'replanning_disabled', nextIteration, maxIterations };
  }
  if (nextIteration >= maxIterations) {
    return { possible: false, cause: 'max_replan_iterations', nextIteration, maxIterations };
  }
  return { possible: true, nextIteration, maxIterations };
}

function judgeSaid(judgement: TaskJudgement): string {
  const reason = judgement.reason.trim();
  return reason === '' ? 'the judge gave no reason' : `judge: ${reason}`;
}

/** The judge's reason followed by what it found missing: what the next execution must fix. */
function continuationFeedback(judgement: TaskJudgement): string {
  const parts: string[] = [];
  const reason = judgement.reason.trim();
  if (reason !== '') parts.push(reason);
  const missing = judgement.missingRequirements.map((m) => m.trim()).filter((m) => m !== '');
  if (missing.length > 0) {
    parts.push(['Missing requirements:', ...missing.map((m) => `- ${m}`)].join('\n'));
  }
  if (parts.length === 0) {
    parts.push('The judge found the task incomplete without saying why; check the acceptance.');
  }
  return parts.join('\n\n');
}

function replanBlockedReason(check: ReplanCheck & { possible: false }): string {
  return check.cause === 'replanning_disabled'
    ? 'replanning is disabled'
    : `replan iteration ${check.nextIteration} would reach the limit of ${check.maxIterations}`;
}

/**
 * Seed 001's three-way judgement, with orq's limits:
 *
 * | judgement                         | outcome                                            |
 * |-----------------------------------|----------------------------------------------------|
 * | success and alreadySatisfied      | satisfied: SKIPPED, dependents go on (issue 50)    |
 * | success                           | done (shouldContinue / shouldReplan are ignored)   |
 * | shouldContinue, continuations left| continue (even if shouldReplan is also set)        |
 * | shouldContinue, none left         | replan if shouldReplan and a replan is possible,   |
 * |                                   | else blocked(max_continuations)                    |
 * | shouldReplan                      | replan, or blocked(replanning_disabled /           |
 * |                                   | max_replan_iterations)                             |
 * | neither                           | blocked(judge_blocked)                             |
 *
 * Continue comes first because the seed checks it first and it is the cheaper recovery. When
 * the continuations are used up but the judge also asked for a replan, a replan is preferred
 * over blocking: the judge has said a different breakdown could succeed, and the replan is
 * itself bounded by maxIterations, so this opens no unbounded loop.
 */
export function decideTaskOutcome(input: DecideTaskOutcomeInput): TaskOutcome {
  const { judgement, task, replanning, execution } = input;
  const said = judgeSaid(judgement);

  if (judgement.success && judgement.alreadySatisfied) {
    return {
      kind: 'satisfied',
      reason: `The judge found the task already satisfied before this execution, so it is skipped and its dependents go on (${said}).`,
    };
  }
  if (judgement.success) {
    return { kind: 'done', reason: `The judge accepted the task (${said}).` };
  }

  if (judgement.shouldContinue) {
    const used = task.continuations;
    const max = execution.maxContinuations;
    if (used < max) {
      const nextContinuations = used + 1;
      return {
        kind: 'continue',
        reason: `The judge asked for another pass, continuation ${nextContinuations} of ${max} (${said}).`,
        feedback: continuationFeedback(judgement),
        nextContinuations,
      };
    }
    if (judgement.shouldReplan) {
      const check = checkReplan(task, replanning);
      if (check.possible) {
        return {
          kind: 'replan',
          reason: `The task used all ${max} continuations and the judge also asked for a replan, so it is replanned as iteration ${check.nextIteration}, below the limit of ${check.maxIterations} (${said}).`,
          nextIteration: check.nextIteration,
        };
      }
      return {
        kind: 'blocked',
        cause: 'max_continuations',
        reason: `The judge asked for another pass but the task already used ${used} of ${max} continuations, and the replan it also asked for is not possible because ${replanBlockedReason(check)} (${said}).`,
      };
    }
    return {
      kind: 'blocked',
      cause: 'max_continuations',
      reason: `The judge asked for another pass but the task already used ${used} of ${max} continuations (${said}).`,
    };
  }

  if (judgement.shouldReplan) {
    const check = checkReplan(task, replanning);
    if (check.possible) {
      return {
        kind: 'replan',
        reason: `The judge asked for a replan, iteration ${check.nextIteration}, below the limit of ${check.maxIterations} (${said}).`,
        nextIteration: check.nextIteration,
      };
    }
    return {
      kind: 'blocked',
      cause: check.cause,
      reason: `The judge asked for a replan but ${replanBlockedReason(check)} (${said}).`,
    };
  }

  return {
    kind: 'blocked',
    cause: 'judge_blocked',
    reason: `The judge found the task failed and asked neither for another pass nor for a replan (${said}).`,
  };
}
