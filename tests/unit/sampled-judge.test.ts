import { describe, expect, it } from 'vitest';
import type { QualityJudgement } from '../../src/shared/domain/plan.js';
import { OrqError } from '../../src/shared/errors.js';
import { createBuiltinModels } from '../../src/workers/llm/builtin.js';
import { parseConfig } from '../../src/shared/config/load.js';
import { AdaptiveJudgingConfig } from '../../src/shared/config/schema.js';
import {
  adaptiveJudge,
  aggregateJudgements,
  judgeSampling,
  median,
  sampledJudge,
} from '../../src/workers/llm/sampled-judge.js';
import { parseScenario } from '../../src/shared/config/scenario.js';
import { judgeIdentity } from '../../src/workers/models.js';
import type { RoleModels } from '../../src/workers/llm/types.js';
import { PLAN_JUDGE_REQUEST } from '../support/judge-requests.js';

const j = (score: number | undefined, isAcceptable: boolean, issue = ''): QualityJudgement => ({
  ...(score === undefined ? {} : { score }),
  isAcceptable,
  issues: issue ? [issue] : [],
  suggestions: [],
});

const request = PLAN_JUDGE_REQUEST;

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

describe('adaptiveJudge', () => {
  const refinement = parseConfig({}).refinement;
  const settings = AdaptiveJudgingConfig.parse({});
  const scenario = parseScenario({
    planJudgements: [
      // Attempt 0: close to 70 at first, then agreeing well above it (the last one repeats).
      [
        { score: 72, isAcceptable: true, issues: ['a'] },
        { score: 66, isAcceptable: false, issues: ['b'] },
        { score: 78, isAcceptable: true, issues: ['c'] },
        { score: 77, isAcceptable: true, issues: ['d'] },
      ],
      // Attempt 1: far from every line.
      { score: 92, isAcceptable: true },
    ],
  });

  function spied(): { models: RoleModels; seen: (number | undefined)[] } {
    const inner = createBuiltinModels({ scenario });
    const seen: (number | undefined)[] = [];
    return {
      seen,
      models: {
        ...inner,
        label: inner.label,
        judgePlan: (r) => {
          seen.push(r.sample);
          return inner.judgePlan(r);
        },
      },
    };
  }

  it('asks again, one call at a time, while the mean is near the acceptance score', async () => {
    const { models, seen } = spied();
    const single = await createBuiltinModels({ scenario }).judgePlan(request);
    const reply = await adaptiveJudge(models, settings, refinement).judgePlan(request);
    expect(seen).toEqual([0, 1, 2, 3]);
    expect(reply.value).toMatchObject({
      score: 73, // the rounded mean of 72, 66, 78, 77
      isAcceptable: true,
      issues: ['a'],
      samples: [72, 66, 78, 77],
      spread: 12,
    });
    expect(reply.value.adaptive?.extraCalls.map((c) => c.call)).toEqual([2, 3, 4]);
    for (const extra of reply.value.adaptive?.extraCalls ?? []) {
      expect(extra.reason).toMatch(/reaches the acceptance score 70: asking again/);
    }
    expect(reply.value.adaptive?.stopped).toMatch(/no line that changes the decision/);
    expect(reply.usage.inputTokens).toBe(single.usage.inputTokens * 4);
  });

  it('makes one call when the score is far from every line', async () => {
    const { models, seen } = spied();
    const reply = await adaptiveJudge(models, settings, refinement).judgePlan({
      ...request,
      attempt: 1,
    });
    expect(seen).toEqual([0]);
    expect(reply.value).toMatchObject({ score: 92, samples: [92], adaptive: { extraCalls: [] } });
  });

  it('stops at maxCalls', async () => {
    const { models, seen } = spied();
    const reply = await adaptiveJudge(models, { ...settings, maxCalls: 2 }, refinement).judgePlan(
      request,
    );
    expect(seen).toEqual([0, 1]);
    expect(reply.value.adaptive?.stopped).toMatch(/maxCalls 2 are used/);
  });

  it('weighs the previous score when the stagnation lines are tested', async () => {
    const replan = parseScenario({
      planJudgements: [
        { score: 50, isAcceptable: false },
        [
          { score: 56, isAcceptable: false },
          { score: 53, isAcceptable: false },
        ],
      ],
    });
    const models = createBuiltinModels({ scenario: replan });
    const judge = adaptiveJudge(models, { ...settings, stagnationLines: true }, refinement);
    // 56 is far from 70; alone it is judged once.
    const alone = await judge.judgePlan({ ...request, attempt: 1 });
    expect(alone.value.samples).toEqual([56]);
    // After 50, 55 is the stagnation line: 56 replans, 54 would reject, so the judge is asked again.
    const after = await judge.judgePlan({
      ...request,
      attempt: 1,
      refinementState: { previousScore: 50, attemptCount: 1, suggestionReplanCount: 0 },
    });
    expect(after.value.samples?.slice(0, 2)).toEqual([56, 53]);
    expect(after.value.adaptive?.extraCalls[0]?.reason).toMatch(
      /stagnation line 55 \(previous score 50 \+ deltaThreshold 5\)/,
    );
  });

  it("is what judgeSampling builds in adaptive mode, and the seeds' single call otherwise", () => {
    const inner = createBuiltinModels();
    const samples = parseConfig({}).llm.judgeSamples;
    expect(judgeSampling(inner, samples, refinement)).toBe(inner);
    expect(judgeSampling(inner, { ...samples, mode: 'adaptive' }, refinement)).not.toBe(inner);
  });
});

describe('judgeIdentity: whose noise a session learns from', () => {
  it('names the judge role’s provider, model and server, and a builtin judge’s scenario', () => {
    const openai = parseConfig({
      llm: {
        default: { provider: 'openai', model: 'gpt-4o-mini' },
        judge: { provider: 'openai', model: 'qwen3', baseUrl: 'http://vllm:8000/v1' },
      },
    }).llm;
    expect(judgeIdentity(openai)).toBe('openai/qwen3 at http://vllm:8000/v1');
    expect(judgeIdentity(parseConfig({}).llm)).toBe('builtin/builtin');
    expect(judgeIdentity({ ...parseConfig({}).llm, scenario: '/tmp/a.json' })).toBe(
      'builtin/builtin scenario /tmp/a.json',
    );
  });
});
