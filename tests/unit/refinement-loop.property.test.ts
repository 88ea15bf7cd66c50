import { describe, it, expect } from 'vitest';
import fc from 'fast-check';
import { RefinementConfig } from '../../src/shared/config/schema.js';
import { RefinementResult } from '../../src/shared/domain/refinement.js';
import {
  advanceRefinementCounters,
  decideBrokenReplan,
  makeRefinementDecision,
} from '../../src/shared/rules/refinement.js';

/** What the QualityJudge says about one plan. */
interface JudgeReply {
  isAcceptable: boolean;
  score: number | undefined;
  issues: string[];
  suggestions: string[];
}

interface Round {
  reply: JudgeReply;
  result: RefinementResult;
}

/**
 * More rounds than any valid config can need: at most maxRefinementAttempts (10) quality replans
 * plus maxSuggestionReplans (5) suggestion replans, then one final decision. A loop still
 * replanning here is unbounded.
 */
const ROUND_LIMIT = 10 + 5 + 1 + 4;

/** The coordinator's refinement loop, reduced to the decision and the counters. */
function runRefinementLoop(
  config: RefinementConfig,
  judge: (round: number) => JudgeReply,
): { rounds: Round[]; final: RefinementResult | undefined } {
  const rounds: Round[] = [];
  let counters = { attemptCount: 0, suggestionReplanCount: 0 };
  let previousScore: number | undefined;
  for (let round = 0; round < ROUND_LIMIT; round++) {
    const reply = judge(round);
    const result = makeRefinementDecision({ ...reply, previousScore, ...counters, config });
    rounds.push({ reply, result });
    if (result.decision !== 'replan') return { rounds, final: result };
    counters = advanceRefinementCounters(result);
    previousScore = reply.score;
  }
  return { rounds, final: undefined };
}

/** A number in [min, max]: integers most of the time, fractions too. */
function thresholdArb(min: number, max: number): fc.Arbitrary<number> {
  return fc.oneof(
    { weight: 3, arbitrary: fc.integer({ min, max }) },
    { weight: 1, arbitrary: fc.double({ min, max, noNaN: true }) },
  );
}

/** Any valid RefinementConfig (ranges from the schema), both stagnation policies. */
function configArb(
  refineSuggestionsOnSuccess: fc.Arbitrary<boolean> = fc.boolean(),
): fc.Arbitrary<RefinementConfig> {
  return fc
    .record({
      maxRefinementAttempts: fc.integer({ min: 0, max: 10 }),
      refineSuggestionsOnSuccess,
      maxSuggestionReplans: fc.integer({ min: 0, max: 5 }),
      deltaThreshold: thresholdArb(0, 50),
      deltaThresholdPercent: thresholdArb(0, 100),
      noiseThreshold: thresholdArb(1, 10),
      stagnationPolicy: fc.constantFrom('reject' as const, 'replan-while-attempts-remain' as const),
    })
    .map((input) => RefinementConfig.parse(input));
}

const judgeReplyArb: fc.Arbitrary<JudgeReply> = fc.record({
  isAcceptable: fc.boolean(),
  // A missing score ends the loop (priority 2), so keep it rare to let loops run long.
  score: fc.option(fc.integer({ min: 0, max: 100 }), { nil: undefined, freq: 10 }),
  issues: fc.array(fc.string({ maxLength: 8 }), { maxLength: 3 }),
  suggestions: fc.array(fc.string({ maxLength: 8 }), { maxLength: 3 }),
});

/** An arbitrary judge: a scripted list of replies, replayed in a cycle. */
const judgeArb = fc
  .array(judgeReplyArb, { minLength: 1, maxLength: ROUND_LIMIT })
  .map((replies) => (round: number) => replies[round % replies.length] as JudgeReply);

const anyConfig = configArb();
const suggestionsOn = configArb(fc.constant(true));
const NUM_RUNS = 1000;

function replansOf(rounds: Round[]) {
  const replans = rounds.filter((r) => r.result.decision === 'replan');
  return {
    all: replans.length,
    suggestion: replans.filter((r) => r.result.reasonCode === 'apply_suggestions').length,
  };
}

describe('the refinement loop, for any judge and any valid config', () => {
  it.each([
    ['any refineSuggestionsOnSuccess', anyConfig],
    ['refineSuggestionsOnSuccess on', suggestionsOn],
  ])('always ends in accept or reject (%s)', (_label, configs) => {
    fc.assert(
      fc.property(configs, judgeArb, (config, judge) => {
        const { final } = runRefinementLoop(config, judge);
        expect(final?.decision).toMatch(/^(accept|reject)$/);
      }),
      { numRuns: NUM_RUNS },
    );
  });

  it.each([
    ['any refineSuggestionsOnSuccess', anyConfig],
    ['refineSuggestionsOnSuccess on', suggestionsOn],
  ])(
    'replans at most maxRefinementAttempts + maxSuggestionReplans times (%s)',
    (_label, configs) => {
      fc.assert(
        fc.property(configs, judgeArb, (config, judge) => {
          const { rounds } = runRefinementLoop(config, judge);
          expect(replansOf(rounds).all).toBeLessThanOrEqual(
            config.maxRefinementAttempts + config.maxSuggestionReplans,
          );
        }),
        { numRuns: NUM_RUNS },
      );
    },
  );

  it.each([
    ['any refineSuggestionsOnSuccess', anyConfig],
    ['refineSuggestionsOnSuccess on', suggestionsOn],
  ])('replans for suggestions at most maxSuggestionReplans times (%s)', (_label, configs) => {
    fc.assert(
      fc.property(configs, judgeArb, (config, judge) => {
        const { rounds } = runRefinementLoop(config, judge);
        expect(replansOf(rounds).suggestion).toBeLessThanOrEqual(config.maxSuggestionReplans);
      }),
      { numRuns: NUM_RUNS },
    );
  });

  it('replans for quality or stagnation at most maxRefinementAttempts times', () => {
    fc.assert(
      fc.property(anyConfig, judgeArb, (config, judge) => {
        const { rounds } = runRefinementLoop(config, judge);
        const { all, suggestion } = replansOf(rounds);
        expect(all - suggestion).toBeLessThanOrEqual(config.maxRefinementAttempts);
      }),
      { numRuns: NUM_RUNS },
    );
  });

  it.each([
    ['any refineSuggestionsOnSuccess', anyConfig],
    ['refineSuggestionsOnSuccess on', suggestionsOn],
  ])('never accepts a plan the judge found unacceptable (%s)', (_label, configs) => {
    fc.assert(
      fc.property(configs, judgeArb, (config, judge) => {
        const { rounds } = runRefinementLoop(config, judge);
        for (const { reply, result } of rounds) {
          if (!reply.isAcceptable) expect(result.decision).not.toBe('accept');
        }
      }),
      { numRuns: NUM_RUNS },
    );
  });

  it('never replans for suggestions when refineSuggestionsOnSuccess is off', () => {
    fc.assert(
      fc.property(configArb(fc.constant(false)), judgeArb, (config, judge) => {
        const { rounds } = runRefinementLoop(config, judge);
        expect(replansOf(rounds).suggestion).toBe(0);
      }),
      { numRuns: NUM_RUNS },
    );
  });

  it("never replans on stagnation under the 'reject' policy", () => {
    const rejectPolicy = anyConfig.map((c) => ({ ...c, stagnationPolicy: 'reject' as const }));
    fc.assert(
      fc.property(rejectPolicy, judgeArb, (config, judge) => {
        const { rounds } = runRefinementLoop(config, judge);
        for (const { result } of rounds) {
          if (result.reasonCode === 'stagnation' || result.reasonCode === 'stagnation_noise') {
            expect(result.decision).not.toBe('replan');
          }
        }
      }),
      { numRuns: NUM_RUNS },
    );
  });

  it("sends the judge's suggestions back with every replan", () => {
    fc.assert(
      fc.property(anyConfig, judgeArb, (config, judge) => {
        const { rounds } = runRefinementLoop(config, judge);
        for (const { reply, result } of rounds) {
          if (result.decision === 'replan') {
            expect(result.feedback?.suggestions).toEqual(reply.suggestions);
          } else {
            expect(result.feedback).toBeUndefined();
          }
        }
      }),
      { numRuns: NUM_RUNS },
    );
  });

  it('records a valid RefinementResult every round', () => {
    fc.assert(
      fc.property(anyConfig, judgeArb, (config, judge) => {
        const { rounds } = runRefinementLoop(config, judge);
        for (const { result } of rounds)
          expect(RefinementResult.safeParse(result).success).toBe(true);
      }),
      { numRuns: NUM_RUNS },
    );
  });
});

describe('the refinement loop with a judge that never accepts but keeps improving', () => {
  // Scores 0, 10, 20, … improve by 10 points and at least 11 % each round, which clears these
  // stagnation and noise thresholds, so only the attempt budget can stop the loop.
  const progressConfig = fc
    .record({
      maxRefinementAttempts: fc.integer({ min: 0, max: 10 }),
      maxSuggestionReplans: fc.integer({ min: 0, max: 5 }),
      refineSuggestionsOnSuccess: fc.boolean(),
      deltaThreshold: thresholdArb(0, 10),
      deltaThresholdPercent: thresholdArb(0, 11),
      noiseThreshold: thresholdArb(1, 10),
      stagnationPolicy: fc.constantFrom('reject' as const, 'replan-while-attempts-remain' as const),
    })
    .map((input) => RefinementConfig.parse(input));

  it('rejects after exactly maxRefinementAttempts quality replans', () => {
    fc.assert(
      fc.property(progressConfig, (config) => {
        const { rounds, final } = runRefinementLoop(config, (round) => ({
          isAcceptable: false,
          score: round * 10,
          issues: ['still incomplete'],
          suggestions: ['add a task'],
        }));
        expect(replansOf(rounds).all).toBe(config.maxRefinementAttempts);
        expect(final?.decision).toBe('reject');
        expect(final?.reasonCode).toBe('max_attempts_reached');
      }),
      { numRuns: NUM_RUNS },
    );
  });
});

describe('the refinement loop when replans may break the structure', () => {
  interface StructuredRound extends Round {
    broken: boolean;
    /** Whether the plan the decision would run (the previous one, for a broken replan) was acceptable. */
    baseAcceptable: boolean | undefined;
  }

  /**
   * The coordinator's loop with seed 000's structure check: a broken replan goes to
   * decideBrokenReplan and leaves the previous plan as the one to improve on.
   */
  function runStructuredLoop(
    config: RefinementConfig,
    judge: (round: number) => JudgeReply,
    breaks: (round: number) => boolean,
  ): { rounds: StructuredRound[]; final: RefinementResult | undefined } {
    const rounds: StructuredRound[] = [];
    let counters = { attemptCount: 0, suggestionReplanCount: 0 };
    let base:
      | { score: number | undefined; acceptable: boolean; feedback?: RefinementResult['feedback'] }
      | undefined;
    for (let round = 0; round < ROUND_LIMIT; round++) {
      const reply = judge(round);
      const broken = round > 0 && breaks(round);
      const result =
        broken && base
          ? decideBrokenReplan({
              problems: ['dependency cycle: A -> B -> A'],
              previousAcceptable: base.acceptable,
              previousScore: base.score,
              score: reply.score,
              previousFeedback: base.feedback,
              ...counters,
              config,
            })
          : makeRefinementDecision({ ...reply, previousScore: base?.score, ...counters, config });
      rounds.push({
        reply,
        result,
        broken,
        baseAcceptable: broken ? base?.acceptable : reply.isAcceptable,
      });
      if (result.decision !== 'replan') return { rounds, final: result };
      counters = advanceRefinementCounters(result);
      if (!broken)
        base = { score: reply.score, acceptable: reply.isAcceptable, feedback: result.feedback };
    }
    return { rounds, final: undefined };
  }

  const configs = fc
    .tuple(anyConfig, fc.boolean())
    .map(([config, enableIndividualFallback]) => ({ ...config, enableIndividualFallback }));
  const breaksArb = fc
    .array(fc.boolean(), { minLength: 1, maxLength: ROUND_LIMIT })
    .map((flags) => (round: number) => flags[round % flags.length] as boolean);

  it('always ends in accept or reject, within the same replan budget', () => {
    fc.assert(
      fc.property(configs, judgeArb, breaksArb, (config, judge, breaks) => {
        const { rounds, final } = runStructuredLoop(config, judge, breaks);
        expect(final?.decision).toMatch(/^(accept|reject)$/);
        const { all, suggestion } = replansOf(rounds);
        expect(all).toBeLessThanOrEqual(config.maxRefinementAttempts + config.maxSuggestionReplans);
        expect(all - suggestion).toBeLessThanOrEqual(config.maxRefinementAttempts);
      }),
      { numRuns: NUM_RUNS },
    );
  });

  it('never runs a broken plan, nor a plan the judge found unacceptable', () => {
    fc.assert(
      fc.property(configs, judgeArb, breaksArb, (config, judge, breaks) => {
        const { final, rounds } = runStructuredLoop(config, judge, breaks);
        const last = rounds.at(-1);
        if (final?.decision === 'accept') expect(last?.baseAcceptable).toBe(true);
        if (last?.broken && final?.decision === 'accept') {
          expect(final.reasonCode).toBe('structure_broken');
          expect(config.enableIndividualFallback).toBe(true);
        }
      }),
      { numRuns: NUM_RUNS },
    );
  });
});
