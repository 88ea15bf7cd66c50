import { describe, expect, it } from 'vitest';
import type { TaskJudgement } from '../../src/shared/domain/task.js';
import { createBuiltinModels } from '../../src/workers/llm/builtin.js';
import { confirmedTaskJudge } from '../../src/workers/llm/sampled-judge.js';
import type { RoleModels, TaskJudgeRequest } from '../../src/workers/llm/types.js';
import {
  confirmVerdict,
  verdictOf,
  type TaskVerdict,
} from '../../src/shared/rules/task-verdict.js';

const costly = ['replan', 'blocked'] as const;

describe('verdictOf', () => {
  it('follows the precedence of task-outcome: success, continue, replan, else blocked', () => {
    const v = (success: boolean, shouldContinue: boolean, shouldReplan: boolean) =>
      verdictOf({ success, shouldContinue, shouldReplan });
    expect(v(true, true, true)).toBe('done');
    expect(v(false, true, true)).toBe('continue');
    expect(v(false, false, true)).toBe('replan');
    expect(v(false, false, false)).toBe('blocked');
  });
});

describe('confirmVerdict', () => {
  it('lets a verdict that is not costly stand on one call', () => {
    expect(confirmVerdict(['done'], costly)).toMatchObject({ settled: true, index: 0 });
    expect(confirmVerdict(['replan'], ['blocked'])).toMatchObject({ settled: true, index: 0 });
  });

  it('asks a second opinion on a costly verdict, and keeps it when confirmed', () => {
    expect(confirmVerdict(['replan'], costly)).toMatchObject({ settled: false });
    expect(confirmVerdict(['replan', 'replan'], costly)).toMatchObject({
      settled: true,
      index: 0,
      reason: 'replan confirmed by a second opinion',
    });
  });

  it('breaks a disagreement with a third call, by majority', () => {
    expect(confirmVerdict(['blocked', 'continue'], costly)).toMatchObject({ settled: false });
    const cases: [TaskVerdict[], number][] = [
      [['blocked', 'continue', 'continue'], 1],
      [['blocked', 'continue', 'blocked'], 0],
      [['replan', 'done', 'done'], 1],
    ];
    for (const [verdicts, index] of cases) {
      expect(confirmVerdict(verdicts, costly)).toMatchObject({ settled: true, index });
    }
  });

  it('takes the first verdict that is not costly when all three differ', () => {
    expect(confirmVerdict(['replan', 'blocked', 'continue'], costly)).toMatchObject({
      settled: true,
      index: 2,
      reason: expect.stringMatching(/all differ: continue/),
    });
  });
});

describe('confirmedTaskJudge', () => {
  const inner = createBuiltinModels();
  const j = (verdict: TaskVerdict, reason: string): TaskJudgement => ({
    success: verdict === 'done',
    shouldContinue: verdict === 'continue',
    shouldReplan: verdict === 'replan',
    reason,
    missingRequirements: [],
  });
  function scripted(verdicts: TaskVerdict[]): { models: RoleModels; seen: (number | undefined)[] } {
    const seen: (number | undefined)[] = [];
    return {
      seen,
      models: {
        ...inner,
        label: inner.label,
        judgeTask: (r) => {
          seen.push(r.sample);
          const verdict = verdicts[r.sample ?? 0] as TaskVerdict;
          return Promise.resolve({
            value: j(verdict, `opinion ${r.sample}`),
            usage: { inputTokens: 10, outputTokens: 1 },
          });
        },
      },
    };
  }
  const request = {} as TaskJudgeRequest; // the scripted judge reads only the sample

  it('returns a confirmed replan with both verdicts, at two calls', async () => {
    const { models, seen } = scripted(['replan', 'replan']);
    const reply = await confirmedTaskJudge(models, costly).judgeTask(request);
    expect(seen).toEqual([0, 1]);
    expect(reply.value).toMatchObject({
      shouldReplan: true,
      reason: 'opinion 0',
      confirmation: { verdicts: ['replan', 'replan'] },
    });
    expect(reply.usage).toEqual({ inputTokens: 20, outputTokens: 2 });
  });

  it('overturns an unconfirmed blocked verdict by a third opinion', async () => {
    const { models, seen } = scripted(['blocked', 'continue', 'continue']);
    const reply = await confirmedTaskJudge(models, costly).judgeTask(request);
    expect(seen).toEqual([0, 1, 2]);
    expect(reply.value).toMatchObject({
      shouldContinue: true,
      reason: 'opinion 1',
      confirmation: { verdicts: ['blocked', 'continue', 'continue'] },
    });
  });

  it('makes one call for a verdict that needs no confirmation, and none of this when off', async () => {
    const { models, seen } = scripted(['done']);
    const reply = await confirmedTaskJudge(models, costly).judgeTask(request);
    expect(seen).toEqual([0]);
    expect(reply.value.confirmation).toBeUndefined();
    expect(confirmedTaskJudge(models, [])).toBe(models);
  });
});
