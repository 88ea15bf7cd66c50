import { describe, expect, it } from 'vitest';
import type { QualityJudgement } from '../../src/shared/domain/plan.js';
import { OrqError } from '../../src/shared/errors.js';
import { createBuiltinModels } from '../../src/shared/llm/builtin.js';
import { aggregateJudgements, median, sampledJudge } from '../../src/shared/llm/sampled-judge.js';
import { parseScenario } from '../../src/shared/llm/scenario.js';
import type { PlanJudgeRequest, RoleModels } from '../../src/shared/llm/types.js';

const j = (score: number | undefined, isAcceptable: boolean, issue = ''): QualityJudgement => ({
  ...(score === undefined ? {} : { score }),
  isAcceptable,
  issues: issue ? [issue] : [],
  suggestions: [],
});

const request: PlanJudgeRequest = {
  sessionId: 's1',
  instruction: 'Write the parser',
  attempt: 0,
  plan: {
    summary: '',
    tasks: [
      {
        id: 't1',
        title: 'Write the parser',
        acceptance: 'parses',
        context: 'c',
        scopePaths: [],
        dependencies: [],
      },
    ],
  },
  requiredTerms: [],
};

describe('median', () => {
  it('is the middle value of an odd list, whatever the order', () => {
    expect(median([61, 55, 58])).toBe(58);
  });

  it('is the mean of the two middle values of an even list', () => {
    expect(median([70, 60, 90, 50])).toBe(65);
  });

  it('refuses an empty list', () => {
    expect(() => median([])).toThrow(RangeError);
  });
});

describe('aggregating judge samples', () => {
  it('decides on the median score and records every score with the spread', () => {
    const result = aggregateJudgements([j(55, false, 'a'), j(92, true, 'b'), j(60, false, 'c')]);
    expect(result.score).toBe(60);
    expect(result.samples).toEqual([55, 92, 60]);
    expect(result.spread).toBe(37);
  });

  it('takes isAcceptable by majority, not from the highest score', () => {
    expect(aggregateJudgements([j(55, false), j(95, true), j(60, false)]).isAcceptable).toBe(false);
    expect(aggregateJudgements([j(71, true), j(40, false), j(72, true)]).isAcceptable).toBe(true);
  });

  it('breaks a tie of votes with the sample closest to the median', () => {
    // median 65; 60 and 70 are equally close: the earlier sample (60, acceptable) speaks.
    const tie = aggregateJudgements([j(60, true), j(70, false), j(50, false), j(80, true)]);
    expect(tie.score).toBe(65);
    expect(tie.isAcceptable).toBe(true);
  });

  it('keeps the issues and suggestions of the sample closest to the median', () => {
    const result = aggregateJudgements([
      j(40, false, 'far low'),
      j(63, false, 'near'),
      j(90, true, 'far high'),
    ]);
    expect(result.issues).toEqual(['near']);
  });

  it('ignores samples without a score for the median but counts their votes', () => {
    const result = aggregateJudgements([j(undefined, false), j(80, true), j(undefined, false)]);
    expect(result.score).toBe(80);
    expect(result.isAcceptable).toBe(false);
    expect(result.samples).toEqual([80]);
  });

  it('leaves the score unavailable when no sample has one', () => {
    const result = aggregateJudgements([j(undefined, false), j(undefined, false)]);
    expect(result.score).toBeUndefined();
    expect(result.spread).toBe(0);
  });
});

describe('sampledJudge', () => {
  const noisy = parseScenario({
    planJudgements: [
      [
        { score: 55, isAcceptable: false, issues: ['low'] },
        { score: 61, isAcceptable: true, issues: ['high'] },
        { score: 58, isAcceptable: false, issues: ['middle'] },
      ],
      { score: 80, isAcceptable: true },
    ],
  });

  it('asks k distinct samples and returns their median with summed usage', async () => {
    const inner = createBuiltinModels({ scenario: noisy });
    const seen: (number | undefined)[] = [];
    const spy: RoleModels = {
      ...inner,
      label: inner.label,
      judgePlan: (r) => {
        seen.push(r.sample);
        return inner.judgePlan(r);
      },
    };
    const single = await inner.judgePlan(request);
    const reply = await sampledJudge(spy, 3).judgePlan(request);
    expect(seen.sort()).toEqual([0, 1, 2]);
    expect(reply.value).toMatchObject({
      score: 58,
      isAcceptable: false,
      issues: ['middle'],
      samples: [55, 61, 58],
      spread: 6,
    });
    expect(reply.usage.inputTokens).toBe(single.usage.inputTokens * 3);
  });

  it('reads the first sample of a list when sampling is off, and single entries for every sample', async () => {
    const inner = createBuiltinModels({ scenario: noisy });
    expect((await sampledJudge(inner, 1).judgePlan(request)).value.score).toBe(55);
    const second = await sampledJudge(inner, 3).judgePlan({ ...request, attempt: 1 });
    expect(second.value).toMatchObject({ score: 80, samples: [80, 80, 80], spread: 0 });
  });

  it('returns the models unchanged for k = 1', () => {
    const inner = createBuiltinModels();
    expect(sampledJudge(inner, 1)).toBe(inner);
  });

  it('throws a budget refusal of any sample, after every sample has settled', async () => {
    const inner = createBuiltinModels({ scenario: noisy });
    let finished = 0;
    const models: RoleModels = {
      ...inner,
      label: inner.label,
      async judgePlan(r) {
        if (r.sample === 0) throw new OrqError('LLM_CALL_FAILED', 'flaky');
        if (r.sample === 2) throw new OrqError('BUDGET_EXHAUSTED', 'no budget');
        const reply = await inner.judgePlan(r);
        finished += 1;
        return reply;
      },
    };
    await expect(sampledJudge(models, 3).judgePlan(request)).rejects.toMatchObject({
      code: 'BUDGET_EXHAUSTED',
    });
    expect(finished).toBe(1);
  });

  it('parses scenarios with and without per-sample lists', () => {
    expect(() =>
      parseScenario({ planJudgements: [{ score: 50, isAcceptable: false }] }),
    ).not.toThrow();
    expect(() =>
      parseScenario({ planJudgements: [[{ error: 'down' }, { score: 50, isAcceptable: false }]] }),
    ).not.toThrow();
    expect(() => parseScenario({ planJudgements: [[]] })).toThrow(/planJudgements/);
  });
});
