import { describe, it, expect } from 'vitest';
import { ExecutionConfig, ReplanningConfig } from '../../src/shared/config/schema.js';
import {
  TaskJudgement,
  TaskJudgementAnswer,
  type ReplanningInfo,
} from '../../src/shared/domain/task.js';
import {
  decideTaskOutcome,
  effectiveMaxReplanIterations,
  TaskOutcome,
  type DecideTaskOutcomeInput,
} from '../../src/shared/rules/task-outcome.js';

const defaults = {
  replanning: ReplanningConfig.parse({}),
  execution: ExecutionConfig.parse({}),
};

function decide(options: {
  judgement: Partial<TaskJudgement>;
  continuations?: number;
  replanningInfo?: ReplanningInfo;
  replanning?: Partial<ReplanningConfig>;
  maxContinuations?: number;
}): TaskOutcome {
  const input: DecideTaskOutcomeInput = {
    judgement: TaskJudgement.parse(options.judgement),
    task: { continuations: options.continuations ?? 0, replanningInfo: options.replanningInfo },
    replanning: { ...defaults.replanning, ...options.replanning },
    execution: {
      ...defaults.execution,
      ...(options.maxContinuations !== undefined
        ? { maxContinuations: options.maxContinuations }
        : {}),
    },
  };
  const outcome = decideTaskOutcome(input);
  // Every outcome is a valid record for the session history.
  expect(TaskOutcome.parse(outcome)).toEqual(outcome);
  return outcome;
}

const atIteration = (iteration: number, maxIterations = 3): ReplanningInfo => ({
  iteration,
  maxIterations,
});

describe('decideTaskOutcome: the three-way judgement of seed 001', () => {
  it('marks a successful task done', () => {
    const outcome = decide({ judgement: { success: true, reason: 'tests pass' } });
    expect(outcome.kind).toBe('done');
    expect(outcome.reason).toContain('tests pass');
  });

  it('marks a task done on success even when the judge also set shouldContinue and shouldReplan', () => {
    const outcome = decide({
      judgement: { success: true, shouldContinue: true, shouldReplan: true },
      continuations: 99,
      replanningInfo: atIteration(5),
    });
    expect(outcome.kind).toBe('done');
  });

  it('continues a failed task the judge wants to continue', () => {
    const outcome = decide({ judgement: { success: false, shouldContinue: true, reason: 'half' } });
    expect(outcome).toMatchObject({ kind: 'continue', nextContinuations: 1 });
    expect(outcome.reason).toContain('half');
  });

  it('replans a failed task the judge wants to replan', () => {
    const outcome = decide({
      judgement: { success: false, shouldReplan: true, reason: 'scope too big' },
    });
    expect(outcome).toMatchObject({ kind: 'replan', nextIteration: 1 });
    expect(outcome.reason).toContain('scope too big');
  });

  it('blocks a failed task when the judge asks neither to continue nor to replan', () => {
    const outcome = decide({ judgement: { success: false, reason: 'needs an API key' } });
    expect(outcome).toMatchObject({ kind: 'blocked', cause: 'judge_blocked' });
    expect(outcome.reason).toContain('needs an API key');
  });

  it('prefers continuing over replanning while continuations remain', () => {
    const outcome = decide({
      judgement: { success: false, shouldContinue: true, shouldReplan: true },
      continuations: 2,
      maxContinuations: 3,
    });
    expect(outcome).toMatchObject({ kind: 'continue', nextContinuations: 3 });
  });

  it('says in the reason when the judge gave none', () => {
    const outcome = decide({ judgement: { success: false } });
    expect(outcome.reason).toContain('no reason');
  });
});

describe('decideTaskOutcome: a task already satisfied (issue 50)', () => {
  it('skips a task the judge found met before it ran, with the reason', () => {
    const outcome = decide({
      judgement: { success: true, alreadySatisfied: true, reason: 'the route existed' },
    });
    expect(outcome.kind).toBe('satisfied');
    expect(outcome.reason).toContain('already satisfied');
    expect(outcome.reason).toContain('judge: the route existed');
  });

  it('marks it done when alreadySatisfied is false or absent', () => {
    expect(decide({ judgement: { success: true, alreadySatisfied: false } }).kind).toBe('done');
    expect(decide({ judgement: { success: true } }).kind).toBe('done');
  });

  it('refuses a verdict that says alreadySatisfied without success', () => {
    for (const flags of [
      { shouldContinue: true },
      { shouldReplan: true },
      { shouldContinue: false, shouldReplan: false },
    ]) {
      const parsed = TaskJudgementAnswer.safeParse({
        success: false,
        alreadySatisfied: true,
        ...flags,
      });
      expect(parsed.success, JSON.stringify(flags)).toBe(false);
      expect(
        TaskJudgement.safeParse({ success: false, alreadySatisfied: true, ...flags }).success,
      ).toBe(false);
    }
  });
});

describe('decideTaskOutcome: continuation feedback', () => {
  it('combines the judge reason and the missing requirements', () => {
    const outcome = decide({
      judgement: {
        success: false,
        shouldContinue: true,
        reason: 'The endpoint exists but is untested.',
        missingRequirements: ['unit tests for POST /login', 'error on a wrong password'],
      },
    });
    expect(outcome.kind).toBe('continue');
    if (outcome.kind !== 'continue') return;
    expect(outcome.feedback).toContain('The endpoint exists but is untested.');
    expect(outcome.feedback).toContain('- unit tests for POST /login');
    expect(outcome.feedback).toContain('- error on a wrong password');
  });

  it('gives the reason alone when nothing is listed as missing', () => {
    const outcome = decide({
      judgement: { success: false, shouldContinue: true, reason: 'Lint fails.' },
    });
    expect(outcome).toMatchObject({ kind: 'continue', feedback: 'Lint fails.' });
  });

  it('still gives usable feedback when the judge gave neither reason nor requirements', () => {
    const outcome = decide({ judgement: { success: false, shouldContinue: true } });
    expect(outcome.kind).toBe('continue');
    if (outcome.kind !== 'continue') return;
    expect(outcome.feedback.length).toBeGreaterThan(0);
  });
});

describe('decideTaskOutcome: the continuation limit', () => {
  it('continues one below maxContinuations', () => {
    const outcome = decide({
      judgement: { success: false, shouldContinue: true },
      continuations: 2,
      maxContinuations: 3,
    });
    expect(outcome).toMatchObject({ kind: 'continue', nextContinuations: 3 });
  });

  it('blocks exactly at maxContinuations', () => {
    const outcome = decide({
      judgement: { success: false, shouldContinue: true, reason: 'still failing' },
      continuations: 3,
      maxContinuations: 3,
    });
    expect(outcome).toMatchObject({ kind: 'blocked', cause: 'max_continuations' });
    expect(outcome.reason).toContain('3 of 3');
    expect(outcome.reason).toContain('still failing');
  });

  it('blocks above maxContinuations, as after the limit was lowered', () => {
    const outcome = decide({
      judgement: { success: false, shouldContinue: true },
      continuations: 5,
      maxContinuations: 3,
    });
    expect(outcome).toMatchObject({ kind: 'blocked', cause: 'max_continuations' });
  });

  it('never continues when maxContinuations is 0', () => {
    const outcome = decide({
      judgement: { success: false, shouldContinue: true },
      continuations: 0,
      maxContinuations: 0,
    });
    expect(outcome).toMatchObject({ kind: 'blocked', cause: 'max_continuations' });
  });

  it('replans instead of blocking when continuations are used up and the judge also asked for a replan', () => {
    const outcome = decide({
      judgement: { success: false, shouldContinue: true, shouldReplan: true },
      continuations: 3,
      maxContinuations: 3,
    });
    expect(outcome).toMatchObject({ kind: 'replan', nextIteration: 1 });
  });

  it('blocks on continuations when they are used up and the fallback replan is disabled', () => {
    const outcome = decide({
      judgement: { success: false, shouldContinue: true, shouldReplan: true },
      continuations: 3,
      maxContinuations: 3,
      replanning: { enabled: false },
    });
    expect(outcome).toMatchObject({ kind: 'blocked', cause: 'max_continuations' });
    expect(outcome.reason).toContain('disabled');
  });

  it('blocks on continuations when they are used up and the fallback replan is over its limit', () => {
    const outcome = decide({
      judgement: { success: false, shouldContinue: true, shouldReplan: true },
      continuations: 3,
      maxContinuations: 3,
      replanningInfo: atIteration(2, 3),
    });
    expect(outcome).toMatchObject({ kind: 'blocked', cause: 'max_continuations' });
  });
});

describe('decideTaskOutcome: the replan limit', () => {
  const replan = { success: false, shouldReplan: true } as const;

  it('replans a task the Planner made (no replanningInfo) as iteration 1', () => {
    expect(decide({ judgement: replan })).toMatchObject({ kind: 'replan', nextIteration: 1 });
  });

  it('replans a task at iteration 0 with maxIterations 3', () => {
    const outcome = decide({ judgement: replan, replanningInfo: atIteration(0, 3) });
    expect(outcome).toMatchObject({ kind: 'replan', nextIteration: 1 });
  });

  it('replans a task at iteration 1 with maxIterations 3', () => {
    const outcome = decide({ judgement: replan, replanningInfo: atIteration(1, 3) });
    expect(outcome).toMatchObject({ kind: 'replan', nextIteration: 2 });
  });

  it('blocks a task at iteration 2 with maxIterations 3, because the next iteration reaches 3', () => {
    const outcome = decide({
      judgement: { ...replan, reason: 'too big again' },
      replanningInfo: atIteration(2, 3),
    });
    expect(outcome).toMatchObject({ kind: 'blocked', cause: 'max_replan_iterations' });
    expect(outcome.reason).toContain('3');
    expect(outcome.reason).toContain('too big again');
  });

  it('blocks a task beyond the limit', () => {
    const outcome = decide({ judgement: replan, replanningInfo: atIteration(7, 3) });
    expect(outcome).toMatchObject({ kind: 'blocked', cause: 'max_replan_iterations' });
  });

  it('never replans when maxIterations is 1', () => {
    const outcome = decide({ judgement: replan, replanning: { maxIterations: 1 } });
    expect(outcome).toMatchObject({ kind: 'blocked', cause: 'max_replan_iterations' });
  });

  it('uses the limit configured when the task has no replanningInfo', () => {
    expect(decide({ judgement: replan, replanning: { maxIterations: 2 } })).toMatchObject({
      kind: 'replan',
      nextIteration: 1,
    });
  });

  it('uses the limit stored on the task over the configured one', () => {
    const outcome = decide({
      judgement: replan,
      replanningInfo: atIteration(2, 5),
      replanning: { maxIterations: 3 },
    });
    expect(outcome).toMatchObject({ kind: 'replan', nextIteration: 3 });
  });

  it('blocks by the limit stored on the task even when the configured one is higher', () => {
    const outcome = decide({
      judgement: replan,
      replanningInfo: atIteration(1, 2),
      replanning: { maxIterations: 10 },
    });
    expect(outcome).toMatchObject({ kind: 'blocked', cause: 'max_replan_iterations' });
  });

  it('reports the chain limit through effectiveMaxReplanIterations', () => {
    expect(effectiveMaxReplanIterations({}, { maxIterations: 3 })).toBe(3);
    expect(
      effectiveMaxReplanIterations({ replanningInfo: atIteration(1, 5) }, { maxIterations: 3 }),
    ).toBe(5);
  });
});

describe('decideTaskOutcome: replanning disabled', () => {
  it('blocks a task the judge wants to replan', () => {
    const outcome = decide({
      judgement: { success: false, shouldReplan: true, reason: 'wrong approach' },
      replanning: { enabled: false },
    });
    expect(outcome).toMatchObject({ kind: 'blocked', cause: 'replanning_disabled' });
    expect(outcome.reason).toContain('disabled');
    expect(outcome.reason).toContain('wrong approach');
  });

  it('reports disabled rather than the limit when both would stop the replan', () => {
    const outcome = decide({
      judgement: { success: false, shouldReplan: true },
      replanning: { enabled: false },
      replanningInfo: atIteration(2, 3),
    });
    expect(outcome).toMatchObject({ kind: 'blocked', cause: 'replanning_disabled' });
  });

  it('still lets the judge continue a task', () => {
    const outcome = decide({
      judgement: { success: false, shouldContinue: true },
      replanning: { enabled: false },
    });
    expect(outcome.kind).toBe('continue');
  });
});
