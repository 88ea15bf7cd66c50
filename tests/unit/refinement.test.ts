import { describe, it, expect } from 'vitest';
import { RefinementConfig } from '../../src/shared/config/schema.js';
import type { RefinementConfigInput } from '../../src/shared/config/schema.js';
import { RefinementResult } from '../../src/shared/domain/refinement.js';
import {
  advanceRefinementCounters,
  decideBrokenReplan,
  determineScoreDirection,
  isScoreChangeSignificant,
  isStagnated,
  makeRefinementDecision,
} from '../../src/shared/rules/refinement.js';
import type { RefinementDecisionParams } from '../../src/shared/rules/refinement.js';

/** Seed defaults: maxRefinementAttempts 2, maxSuggestionReplans 1, delta 5 / 5 %, noise 3. */
const defaults = RefinementConfig.parse({});

function config(overrides: RefinementConfigInput = {}): RefinementConfig {
  return RefinementConfig.parse(overrides);
}

/** An acceptable first plan at score 80 unless the test says otherwise. */
function decide(
  overrides: Partial<Omit<RefinementDecisionParams, 'config'>> & { config?: RefinementConfig } = {},
) {
  return makeRefinementDecision({
    isAcceptable: true,
    score: 80,
    issues: [],
    suggestions: [],
    attemptCount: 0,
    suggestionReplanCount: 0,
    config: defaults,
    ...overrides,
  });
}

describe('isStagnated', () => {
  it.each([
    ['the current score is missing', undefined, 70],
    ['the previous score is missing (first plan)', 70, undefined],
    ['both scores are missing', undefined, undefined],
  ])('is false when %s', (_why, current, previous) => {
    expect(isStagnated(current, previous, defaults)).toBe(false);
  });

  it.each([
    // [why, current, previous, deltaThreshold, deltaThresholdPercent, stagnated]
    ['an improvement just below deltaThreshold', 74, 70, 5, 5, true],
    ['an improvement exactly at deltaThreshold', 75, 70, 5, 5, false],
    ['an improvement just above deltaThreshold', 76, 70, 5, 5, false],
    ['a relative improvement just below deltaThresholdPercent', 54, 50, 1, 10, true],
    ['a relative improvement exactly at deltaThresholdPercent', 55, 50, 1, 10, false],
    ['a relative improvement just above deltaThresholdPercent', 56, 50, 1, 10, false],
    ['enough absolute but too little relative improvement (OR)', 62, 60, 2, 5, true],
    ['enough relative but too little absolute improvement (OR)', 14, 10, 5, 5, true],
    ['a lower score', 60, 70, 5, 5, true],
    ['an unchanged score', 70, 70, 5, 5, true],
  ])('judges %s', (_why, current, previous, deltaThreshold, deltaThresholdPercent, expected) => {
    expect(isStagnated(current, previous, config({ deltaThreshold, deltaThresholdPercent }))).toBe(
      expected,
    );
  });

  it('ignores the relative criterion when the previous score is 0', () => {
    // 10 vs 0 has no meaningful percentage; the absolute improvement 10 ≥ 5 decides.
    expect(isStagnated(10, 0, defaults)).toBe(false);
  });

  it('still applies the absolute criterion when the previous score is 0', () => {
    expect(isStagnated(4, 0, defaults)).toBe(true);
    expect(isStagnated(5, 0, defaults)).toBe(false);
  });
});

describe('isScoreChangeSignificant (seed 003)', () => {
  it.each([
    [75, 70],
    [73, 70],
  ])('treats a difference at or above the threshold as significant (%d vs %d)', (cur, prev) => {
    expect(isScoreChangeSignificant(cur, prev, 3)).toBe(true);
  });

  it.each([
    [72, 70],
    [71, 70],
  ])('treats a difference below the threshold as noise (%d vs %d)', (cur, prev) => {
    expect(isScoreChangeSignificant(cur, prev, 3)).toBe(false);
  });

  it('compares a drop by its absolute size', () => {
    expect(isScoreChangeSignificant(67, 70, 3)).toBe(true);
    expect(isScoreChangeSignificant(68, 70, 3)).toBe(false);
  });

  it('treats a first plan (no previous score) as significant', () => {
    expect(isScoreChangeSignificant(70, undefined, 3)).toBe(true);
    expect(isScoreChangeSignificant(undefined, undefined, 3)).toBe(true);
  });

  it('treats a missing current score as significant so later rules decide', () => {
    expect(isScoreChangeSignificant(undefined, 70, 3)).toBe(true);
  });
});

describe('determineScoreDirection (seed 003)', () => {
  it.each([
    [75, 70],
    [73, 70],
  ])('calls a significant rise improved (%d vs %d)', (cur, prev) => {
    expect(determineScoreDirection(cur, prev, 3)).toBe('improved');
  });

  it.each([
    [66, 70],
    [67, 70],
  ])('calls a significant drop degraded (%d vs %d)', (cur, prev) => {
    expect(determineScoreDirection(cur, prev, 3)).toBe('degraded');
  });

  it.each([
    [72, 70],
    [68, 70],
    [70, 70],
  ])('calls a change within noise stable (%d vs %d)', (cur, prev) => {
    expect(determineScoreDirection(cur, prev, 3)).toBe('stable');
  });

  it.each([
    [undefined, 70],
    [70, undefined],
    [undefined, undefined],
  ])('calls a missing score unknown (%s vs %s)', (cur, prev) => {
    expect(determineScoreDirection(cur, prev, 3)).toBe('unknown');
  });
});

describe('makeRefinementDecision: seed 003 noise-tolerance table', () => {
  // The seed's rows judge with attemptCount 1; kept as written (one attempt left of 2).
  it('handles a first plan below quality by the normal flow: replan', () => {
    const result = decide({
      isAcceptable: false,
      score: 55,
      issues: ['issue1'],
      suggestions: ['suggestion1'],
      attemptCount: 1,
    });
    expect(result.decision).toBe('replan');
    expect(result.reasonCode).toBe('quality_below_threshold');
    expect(result.scoreDirection).toBe('unknown');
  });

  it('accepts a first plan of good quality', () => {
    const result = decide({ isAcceptable: true, score: 70, attemptCount: 1 });
    expect(result.decision).toBe('accept');
    expect(result.reasonCode).toBe('quality_ok');
    expect(result.scoreDirection).toBe('unknown');
  });

  it('treats a change within noise as stagnation and accepts a good plan', () => {
    const result = decide({ isAcceptable: true, score: 72, previousScore: 70, attemptCount: 1 });
    expect(result.decision).toBe('accept');
    expect(result.reasonCode).toBe('stagnation_noise');
    expect(result.scoreDirection).toBe('stable');
  });

  it('calls a significant but too small improvement stagnation', () => {
    const result = decide({ isAcceptable: true, score: 73, previousScore: 70, attemptCount: 1 });
    expect(result.decision).toBe('accept');
    expect(result.reasonCode).toBe('stagnation');
    expect(result.scoreDirection).toBe('improved');
  });

  it('accepts a good plan that improved enough', () => {
    const result = decide({ isAcceptable: true, score: 80, previousScore: 70, attemptCount: 1 });
    expect(result.decision).toBe('accept');
    expect(result.reasonCode).toBe('quality_ok');
    expect(result.scoreDirection).toBe('improved');
  });

  it('replans a plan below quality that improved enough', () => {
    const result = decide({
      isAcceptable: false,
      score: 55,
      previousScore: 45,
      issues: ['issue1'],
      suggestions: ['suggestion1'],
      attemptCount: 1,
    });
    expect(result.decision).toBe('replan');
    expect(result.reasonCode).toBe('quality_below_threshold');
    expect(result.scoreDirection).toBe('improved');
  });

  it('rejects a plan below quality whose change is within noise', () => {
    const result = decide({
      isAcceptable: false,
      score: 52,
      previousScore: 50,
      issues: ['issue1'],
      attemptCount: 1,
    });
    expect(result.decision).toBe('reject');
    expect(result.reasonCode).toBe('stagnation_noise');
    expect(result.scoreDirection).toBe('stable');
  });

  it('still works when noiseThreshold equals deltaThreshold', () => {
    const result = decide({
      isAcceptable: true,
      score: 73,
      previousScore: 70,
      attemptCount: 1,
      config: config({ noiseThreshold: 5, deltaThreshold: 5 }),
    });
    expect(result.decision).toBe('accept');
    expect(result.scoreDirection).toBe('stable');
  });

  it('replans from a previous score of 0 because the absolute improvement is enough', () => {
    const result = decide({
      isAcceptable: false,
      score: 10,
      previousScore: 0,
      issues: ['issue1'],
      attemptCount: 1,
    });
    expect(result.decision).toBe('replan');
    expect(result.reasonCode).toBe('quality_below_threshold');
    expect(result.scoreDirection).toBe('improved');
  });
});

describe('makeRefinementDecision: seed 000 priorities', () => {
  describe('priority 1: attempts exhausted', () => {
    it('rejects an unacceptable plan', () => {
      const result = decide({ isAcceptable: false, score: 40, attemptCount: 2 });
      expect(result.decision).toBe('reject');
      expect(result.reasonCode).toBe('max_attempts_reached');
    });

    it('accepts an acceptable plan', () => {
      const result = decide({ isAcceptable: true, score: 90, attemptCount: 2 });
      expect(result.decision).toBe('accept');
      expect(result.reasonCode).toBe('max_attempts_reached');
    });
  });

  describe('priority 2: no score', () => {
    it('rejects an unacceptable plan', () => {
      const result = decide({ isAcceptable: false, score: undefined, issues: ['x'] });
      expect(result.decision).toBe('reject');
      expect(result.reasonCode).toBe('score_unavailable');
    });

    it('accepts an acceptable plan', () => {
      const result = decide({ isAcceptable: true, score: undefined });
      expect(result.decision).toBe('accept');
      expect(result.reasonCode).toBe('score_unavailable');
    });

    it('applies to the first plan too (seed 000 v3.1)', () => {
      const result = decide({ isAcceptable: false, score: undefined, attemptCount: 0 });
      expect(result.decision).toBe('reject');
      expect(result.reasonCode).toBe('score_unavailable');
    });
  });

  describe('priority 3: stagnation, default policy reject (seed 003)', () => {
    it('rejects an unacceptable plan that did not improve enough', () => {
      const result = decide({ isAcceptable: false, score: 54, previousScore: 50, issues: ['x'] });
      expect(result.decision).toBe('reject');
      expect(result.reasonCode).toBe('stagnation');
      expect(result.feedback).toBeUndefined();
    });

    it('accepts an acceptable plan that did not improve enough', () => {
      const result = decide({ isAcceptable: true, score: 74, previousScore: 70 });
      expect(result.decision).toBe('accept');
      expect(result.reasonCode).toBe('stagnation');
    });

    it('is the default of a parsed config', () => {
      expect(defaults.stagnationPolicy).toBe('reject');
    });
  });

  describe("priority 3: stagnation, policy 'replan-while-attempts-remain' (seed 000)", () => {
    const keepReplanning = config({ stagnationPolicy: 'replan-while-attempts-remain' });

    it('replans an unacceptable plan that did not improve enough, with all the feedback', () => {
      const result = decide({
        isAcceptable: false,
        score: 54,
        previousScore: 50,
        issues: ['missing tests'],
        suggestions: ['split task 2'],
        attemptCount: 1,
        config: keepReplanning,
      });
      expect(result.decision).toBe('replan');
      expect(result.reasonCode).toBe('stagnation');
      expect(result.feedback).toEqual({ issues: ['missing tests'], suggestions: ['split task 2'] });
    });

    it('replans an unacceptable plan whose change is within noise', () => {
      const result = decide({
        isAcceptable: false,
        score: 51,
        previousScore: 50,
        config: keepReplanning,
      });
      expect(result.decision).toBe('replan');
      expect(result.reasonCode).toBe('stagnation_noise');
    });

    it('accepts an acceptable plan that did not improve enough', () => {
      const result = decide({
        isAcceptable: true,
        score: 74,
        previousScore: 70,
        config: keepReplanning,
      });
      expect(result.decision).toBe('accept');
      expect(result.reasonCode).toBe('stagnation');
    });

    it('still rejects once the attempts are exhausted (priority 1)', () => {
      const result = decide({
        isAcceptable: false,
        score: 54,
        previousScore: 50,
        attemptCount: 2,
        config: keepReplanning,
      });
      expect(result.decision).toBe('reject');
      expect(result.reasonCode).toBe('max_attempts_reached');
    });
  });

  describe('priority 4: below quality', () => {
    it('replans with the issues and the suggestions as feedback', () => {
      const result = decide({
        isAcceptable: false,
        score: 40,
        issues: ['no rollback step'],
        suggestions: ['add a rollback task'],
      });
      expect(result.decision).toBe('replan');
      expect(result.reasonCode).toBe('quality_below_threshold');
      expect(result.feedback).toEqual({
        issues: ['no rollback step'],
        suggestions: ['add a rollback task'],
      });
    });
  });

  describe('priority 5: acceptable with suggestions', () => {
    const refine = config({ refineSuggestionsOnSuccess: true });

    it('replans to apply the suggestions, without the issues', () => {
      const result = decide({
        score: 85,
        issues: ['minor wording'],
        suggestions: ['add a docs task'],
        config: refine,
      });
      expect(result.decision).toBe('replan');
      expect(result.reasonCode).toBe('apply_suggestions');
      expect(result.feedback).toEqual({ issues: [], suggestions: ['add a docs task'] });
    });

    it('does not replan when refineSuggestionsOnSuccess is off (the default)', () => {
      const result = decide({ score: 85, suggestions: ['add a docs task'] });
      expect(result.decision).toBe('accept');
      expect(result.reasonCode).toBe('quality_ok');
    });

    it('does not replan when there are no suggestions', () => {
      const result = decide({ score: 85, suggestions: [], config: refine });
      expect(result.decision).toBe('accept');
      expect(result.reasonCode).toBe('quality_ok');
    });
  });

  describe('priority 6: acceptable', () => {
    it('accepts without feedback', () => {
      const result = decide({ score: 85 });
      expect(result.decision).toBe('accept');
      expect(result.reasonCode).toBe('quality_ok');
      expect(result.feedback).toBeUndefined();
    });
  });
});

describe('makeRefinementDecision: order of the priorities', () => {
  it('lets exhausted attempts win over a missing score (1 before 2)', () => {
    const result = decide({ isAcceptable: true, score: undefined, attemptCount: 2 });
    expect(result.reasonCode).toBe('max_attempts_reached');
  });

  it('lets exhausted attempts win over stagnation (1 before 3)', () => {
    const result = decide({ isAcceptable: false, score: 51, previousScore: 50, attemptCount: 2 });
    expect(result.reasonCode).toBe('max_attempts_reached');
  });

  it('lets exhausted attempts win over a quality replan (1 before 4)', () => {
    const result = decide({ isAcceptable: false, score: 80, previousScore: 50, attemptCount: 2 });
    expect(result.decision).toBe('reject');
    expect(result.reasonCode).toBe('max_attempts_reached');
  });

  it('lets exhausted attempts win over a suggestion replan (1 before 5)', () => {
    const result = decide({
      suggestions: ['s'],
      attemptCount: 2,
      config: config({ refineSuggestionsOnSuccess: true }),
    });
    expect(result.decision).toBe('accept');
    expect(result.reasonCode).toBe('max_attempts_reached');
  });

  it('lets a missing score win over stagnation (2 before 3)', () => {
    const result = decide({ isAcceptable: false, score: undefined, previousScore: 50 });
    expect(result.reasonCode).toBe('score_unavailable');
  });

  it('lets stagnation win over a quality replan (3 before 4)', () => {
    const result = decide({ isAcceptable: false, score: 53, previousScore: 50, issues: ['x'] });
    expect(result.decision).toBe('reject');
    expect(result.reasonCode).toBe('stagnation');
  });

  it('lets stagnation win over a suggestion replan (3 before 5)', () => {
    const result = decide({
      score: 73,
      previousScore: 70,
      suggestions: ['s'],
      config: config({ refineSuggestionsOnSuccess: true }),
    });
    expect(result.decision).toBe('accept');
    expect(result.reasonCode).toBe('stagnation');
  });

  it('lets a quality replan win over a suggestion replan (4 before 5)', () => {
    const result = decide({
      isAcceptable: false,
      score: 40,
      suggestions: ['s'],
      config: config({ refineSuggestionsOnSuccess: true }),
    });
    expect(result.reasonCode).toBe('quality_below_threshold');
    expect(result.feedback).toEqual({ issues: [], suggestions: ['s'] });
  });

  it('reports noise rather than stagnation when both hold', () => {
    // 72 vs 70: within noise 3 and below deltaThreshold 5.
    const result = decide({ score: 72, previousScore: 70 });
    expect(result.reasonCode).toBe('stagnation_noise');
  });

  it('treats noise as stagnation even when the improvement clears deltaThreshold', () => {
    // A (discouraged) noiseThreshold above deltaThreshold: 75 vs 70 is enough progress but noise.
    const result = decide({
      isAcceptable: false,
      score: 75,
      previousScore: 70,
      config: config({ noiseThreshold: 10, deltaThreshold: 5 }),
    });
    expect(isStagnated(75, 70, config({ noiseThreshold: 10, deltaThreshold: 5 }))).toBe(false);
    expect(result.decision).toBe('reject');
    expect(result.reasonCode).toBe('stagnation_noise');
  });
});

describe('makeRefinementDecision: threshold boundaries', () => {
  it.each([
    // [score vs 70, decision, reasonCode] for an unacceptable plan, deltaThreshold 5
    [74, 'reject', 'stagnation'],
    [75, 'replan', 'quality_below_threshold'],
    [76, 'replan', 'quality_below_threshold'],
  ] as const)('deltaThreshold 5: score %d vs 70 → %s', (score, decision, reasonCode) => {
    const result = decide({ isAcceptable: false, score, previousScore: 70 });
    expect(result.decision).toBe(decision);
    expect(result.reasonCode).toBe(reasonCode);
  });

  it.each([
    // deltaThreshold 1 so that only the relative criterion (10 %) can fire
    [54, 'reject', 'stagnation'],
    [55, 'replan', 'quality_below_threshold'],
    [56, 'replan', 'quality_below_threshold'],
  ] as const)('deltaThresholdPercent 10: score %d vs 50 → %s', (score, decision, reasonCode) => {
    const result = decide({
      isAcceptable: false,
      score,
      previousScore: 50,
      config: config({ deltaThreshold: 1, deltaThresholdPercent: 10 }),
    });
    expect(result.decision).toBe(decision);
    expect(result.reasonCode).toBe(reasonCode);
  });

  it.each([
    // stagnation criteria at 0 so that only noise (3) can fire, except for a drop
    [72, 'stagnation_noise'],
    [73, 'quality_ok'],
    [74, 'quality_ok'],
    [68, 'stagnation_noise'],
    [67, 'stagnation'],
  ] as const)('noiseThreshold 3: score %d vs 70 → %s', (score, reasonCode) => {
    const result = decide({
      score,
      previousScore: 70,
      config: config({ deltaThreshold: 0, deltaThresholdPercent: 0, noiseThreshold: 3 }),
    });
    expect(result.decision).toBe('accept');
    expect(result.reasonCode).toBe(reasonCode);
  });

  it.each([
    [1, 'replan', 'quality_below_threshold'],
    [2, 'reject', 'max_attempts_reached'],
    [3, 'reject', 'max_attempts_reached'],
  ] as const)(
    'maxRefinementAttempts 2: attemptCount %d → %s',
    (attemptCount, decision, reasonCode) => {
      const result = decide({ isAcceptable: false, score: 40, attemptCount });
      expect(result.decision).toBe(decision);
      expect(result.reasonCode).toBe(reasonCode);
    },
  );

  it('maxRefinementAttempts 0: decides the first plan at once', () => {
    const result = decide({
      isAcceptable: false,
      score: 40,
      attemptCount: 0,
      config: config({ maxRefinementAttempts: 0 }),
    });
    expect(result.decision).toBe('reject');
    expect(result.reasonCode).toBe('max_attempts_reached');
  });

  it.each([
    [0, 'replan', 'apply_suggestions'],
    [1, 'accept', 'quality_ok'],
    [2, 'accept', 'quality_ok'],
  ] as const)(
    'maxSuggestionReplans 1: suggestionReplanCount %d → %s',
    (suggestionReplanCount, decision, reasonCode) => {
      const result = decide({
        suggestions: ['s'],
        suggestionReplanCount,
        config: config({ refineSuggestionsOnSuccess: true, maxSuggestionReplans: 1 }),
      });
      expect(result.decision).toBe(decision);
      expect(result.reasonCode).toBe(reasonCode);
    },
  );

  it('maxSuggestionReplans 0: never replans for suggestions', () => {
    const result = decide({
      suggestions: ['s'],
      config: config({ refineSuggestionsOnSuccess: true, maxSuggestionReplans: 0 }),
    });
    expect(result.reasonCode).toBe('quality_ok');
  });
});

describe('makeRefinementDecision: the recorded result', () => {
  it('echoes the counters, both scores and the score direction', () => {
    const result = decide({
      isAcceptable: false,
      score: 60,
      previousScore: 45,
      attemptCount: 1,
      suggestionReplanCount: 1,
    });
    expect(result).toMatchObject({
      currentScore: 60,
      previousScore: 45,
      attemptCount: 1,
      suggestionReplanCount: 1,
      scoreDirection: 'improved',
    });
  });

  it('leaves currentScore out when the judge gave no score', () => {
    const result = decide({ score: undefined, previousScore: 70 });
    expect(result).not.toHaveProperty('currentScore');
    expect(result.previousScore).toBe(70);
  });

  it('is a valid RefinementResult for every reason code', () => {
    const results = [
      decide({ attemptCount: 2 }),
      decide({ score: undefined }),
      decide({ score: 73, previousScore: 70 }),
      decide({ score: 71, previousScore: 70 }),
      decide({ isAcceptable: false, score: 40 }),
      decide({ suggestions: ['s'], config: config({ refineSuggestionsOnSuccess: true }) }),
      decide(),
    ];
    expect(new Set(results.map((r) => r.reasonCode)).size).toBe(7);
    for (const result of results) expect(RefinementResult.parse(result)).toEqual(result);
  });

  it('names the scores and noiseThreshold in a noise reason', () => {
    expect(decide({ score: 72, previousScore: 70 }).reason).toContain(
      'score 72 vs 70 differs by less than noiseThreshold 3',
    );
  });

  it('names the improvement and deltaThreshold in a stagnation reason', () => {
    expect(decide({ score: 74, previousScore: 70 }).reason).toContain(
      'improvement 4 is below deltaThreshold 5',
    );
  });

  it('names the relative improvement and deltaThresholdPercent in a stagnation reason', () => {
    const result = decide({
      score: 54,
      previousScore: 50,
      config: config({ deltaThreshold: 1, deltaThresholdPercent: 10 }),
    });
    expect(result.reason).toContain('relative improvement 8% is below deltaThresholdPercent 10');
  });

  it('names the attempts used in an attempts-exhausted reason', () => {
    expect(decide({ isAcceptable: false, attemptCount: 2 }).reason).toContain(
      '2 of maxRefinementAttempts 2',
    );
  });

  it('names the suggestion budget in a suggestion-replan reason', () => {
    const result = decide({
      suggestions: ['a', 'b'],
      config: config({ refineSuggestionsOnSuccess: true }),
    });
    expect(result.reason).toContain('2 suggestions');
    expect(result.reason).toContain('0 of maxSuggestionReplans 1');
  });
});

describe('advanceRefinementCounters', () => {
  it('spends an attempt on a quality replan', () => {
    const result = decide({ isAcceptable: false, score: 40, attemptCount: 1 });
    expect(advanceRefinementCounters(result)).toEqual({
      attemptCount: 2,
      suggestionReplanCount: 0,
    });
  });

  it('spends an attempt on a stagnation replan', () => {
    const result = decide({
      isAcceptable: false,
      score: 51,
      previousScore: 50,
      config: config({ stagnationPolicy: 'replan-while-attempts-remain' }),
    });
    expect(result.decision).toBe('replan');
    expect(advanceRefinementCounters(result)).toEqual({
      attemptCount: 1,
      suggestionReplanCount: 0,
    });
  });

  it('spends a suggestion replan, not an attempt, on applying suggestions', () => {
    const result = decide({
      suggestions: ['s'],
      attemptCount: 1,
      config: config({ refineSuggestionsOnSuccess: true, maxSuggestionReplans: 2 }),
    });
    expect(advanceRefinementCounters(result)).toEqual({
      attemptCount: 1,
      suggestionReplanCount: 1,
    });
  });

  it('leaves the counters alone on accept', () => {
    const result = decide({ attemptCount: 1, suggestionReplanCount: 1 });
    expect(advanceRefinementCounters(result)).toEqual({
      attemptCount: 1,
      suggestionReplanCount: 1,
    });
  });

  it('leaves the counters alone on reject', () => {
    const result = decide({ isAcceptable: false, score: undefined, attemptCount: 1 });
    expect(result.decision).toBe('reject');
    expect(advanceRefinementCounters(result)).toEqual({
      attemptCount: 1,
      suggestionReplanCount: 0,
    });
  });

  it('leads to priority 1 after maxRefinementAttempts quality replans', () => {
    let counters = { attemptCount: 0, suggestionReplanCount: 0 };
    const scores = [20, 40, 60];
    const decisions = scores.map((score, i) => {
      const result = decide({
        isAcceptable: false,
        score,
        previousScore: scores[i - 1],
        ...counters,
      });
      counters = advanceRefinementCounters(result);
      return result.reasonCode;
    });
    expect(decisions).toEqual([
      'quality_below_threshold',
      'quality_below_threshold',
      'max_attempts_reached',
    ]);
  });
});

describe('decideBrokenReplan (seed 000: a replan whose structure broke is not run)', () => {
  const problems = ['task count changed by 100% (5 -> 10)'];
  const broken = (
    overrides: Partial<Parameters<typeof decideBrokenReplan>[0]> = {},
  ): RefinementResult =>
    RefinementResult.parse(
      decideBrokenReplan({
        problems,
        previousAcceptable: false,
        previousScore: 50,
        score: 90,
        previousFeedback: { issues: ['No tests'], suggestions: ['Add a README task'] },
        attemptCount: 1,
        suggestionReplanCount: 0,
        config: defaults,
        ...overrides,
      }),
    );

  // Every combination: previous plan acceptable or not, fallback on or off, attempts left or not.
  it.each([
    [true, true, 1, 'accept'],
    [true, true, 2, 'accept'],
    [true, false, 1, 'replan'],
    [true, false, 2, 'reject'],
    [false, true, 1, 'replan'],
    [false, true, 2, 'reject'],
    [false, false, 1, 'replan'],
    [false, false, 2, 'reject'],
  ] as const)(
    'previous acceptable %s, enableIndividualFallback %s, %i of 2 attempts used: %s',
    (previousAcceptable, enableIndividualFallback, attemptCount, decision) => {
      const result = broken({
        previousAcceptable,
        attemptCount,
        config: config({ enableIndividualFallback }),
      });
      expect(result.decision).toBe(decision);
      expect(result.reasonCode).toBe('structure_broken');
      expect(result.reason).toContain('replan broke the structure (task count changed by 100%');
    },
  );

  it('accepts the previous plan when it was acceptable, whatever the attempts', () => {
    const result = broken({ previousAcceptable: true, attemptCount: 2 });
    expect(result.reason).toContain('falling back to the previous plan, which was acceptable');
    expect(result.feedback).toBeUndefined();
  });

  it("asks the Planner to revise the previous plan, with the problems and the judge's feedback", () => {
    const result = broken();
    expect(result.feedback).toEqual({
      issues: [
        "Your last revision broke the plan's structure (task count changed by 100% (5 -> 10)). Revise the previous plan instead, keeping its structure.",
        'No tests',
      ],
      suggestions: ['Add a README task'],
    });
    expect(result.reason).toContain('the previous plan was not acceptable: replanning from it');
    expect(result.reason).toContain('1 of 2 attempts used');
    // It spends a refinement attempt, so the loop stays bounded.
    expect(advanceRefinementCounters(result)).toEqual({
      attemptCount: 2,
      suggestionReplanCount: 0,
    });
  });

  it('asks with the problems alone when the judge said nothing of the previous plan', () => {
    expect(broken({ previousFeedback: undefined }).feedback).toEqual({
      issues: [expect.stringContaining("broke the plan's structure")],
      suggestions: [],
    });
  });

  it('says why it fails once the attempts are used, and why it could not fall back', () => {
    expect(broken({ attemptCount: 2 }).reason).toBe(
      'replan broke the structure (task count changed by 100% (5 -> 10)); the previous plan was not acceptable, and 2 of maxRefinementAttempts 2 refinement attempts are used',
    );
    const off = broken({
      previousAcceptable: true,
      attemptCount: 2,
      config: config({ enableIndividualFallback: false }),
    });
    expect(off.reason).toContain(
      'the previous plan was acceptable, but enableIndividualFallback is off',
    );
  });

  it('records both scores and the direction between them', () => {
    expect(broken()).toMatchObject({
      previousScore: 50,
      currentScore: 90,
      scoreDirection: 'improved',
      attemptCount: 1,
      suggestionReplanCount: 0,
    });
    const first = broken({ previousScore: undefined, score: undefined });
    expect(first.previousScore).toBeUndefined();
    expect(first.currentScore).toBeUndefined();
    expect(first.scoreDirection).toBe('unknown');
  });
});
