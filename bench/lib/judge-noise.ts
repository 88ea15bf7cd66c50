import type { RefinementConfig } from '../../src/shared/config/schema.js';
import type { RefinementDecision } from '../../src/shared/domain/refinement.js';
import {
  advanceRefinementCounters,
  makeRefinementDecision,
} from '../../src/shared/rules/refinement.js';
import {
  addSpread,
  nextJudgeStep,
  noisePrior,
  spreadOf,
  type AdaptiveJudgingSettings,
  type NoisePool,
} from '../../src/shared/rules/adaptive-judging.js';
import { median } from './stats.js';
import { gaussian, seededRng, uniform, type Rng } from './random.js';

/**
 * Judge noise, simulated: plans of known true quality go through the seeds' refinement loop
 * (makeRefinementDecision + advanceRefinementCounters) with a judge whose score is the true
 * quality plus gaussian noise. Pure computation, no Redis.
 *
 * "Wrong" is judged against the true quality and the acceptance threshold (70):
 *  - accept of a plan whose true quality is below 70;
 *  - replan of a plan whose true quality is 70 or more (a good plan thrown back, calls spent);
 *  - reject of a plan whose true quality is 70 or more.
 * A replan or reject of a plan truly below 70, and an accept of one truly at 70 or more, are right.
 */

export const ACCEPTANCE_THRESHOLD = 70;

export interface NoiseModel {
  /** Standard deviation of the judge's gaussian noise, in score points. */
  sigma: number;
  /** True quality of first plans: uniform in [min, max], rounded to whole points. */
  firstQuality: [number, number];
  /** True quality gained by one replan with the judge's feedback: uniform in [min, max], rounded. */
  replanGain: [number, number];
}

export interface JudgingVariant {
  /** Label, e.g. "nt3_k1". */
  key: string;
  noiseThreshold: number;
  /** Judge calls per plan; the median score (and its ≥ 70 verdict) is used. Odd. */
  k: number;
  /** Overrides deltaThreshold and deltaThresholdPercent (0 turns stagnation into "got worse"). */
  deltaThreshold?: number;
  /**
   * Adaptive judging (src/shared/rules/adaptive-judging.ts) instead of k fixed calls: one call,
   * then more while a decision line lies within the margin; the mean score decides.
   */
  adaptive?: AdaptiveJudgingSettings;
  /**
   * With adaptive.learnNoise the run's sessions share one judge's memory of its noise, as one
   * Redis does; it is emptied every `forgetEvery` sessions (a judge new to orq), never if unset.
   */
  forgetEvery?: number;
}

export interface DecisionTally {
  count: number;
  wrong: number;
}

export interface NoiseOutcome {
  sessions: number;
  decisions: number;
  byDecision: Record<RefinementDecision, DecisionTally>;
  /** Sessions whose final decision was wrong: a bad plan accepted or a good one rejected. */
  wrongOutcomes: number;
  llmCalls: number;
  /** The judge's share of llmCalls. */
  judgeCalls: number;
}

/** One judge verdict: the median of k noisy scores, rounded and clamped like a real judge's. */
export function judgeScore(trueQuality: number, sigma: number, k: number, rng: Rng): number {
  const scores = Array.from({ length: k }, () => noisyScore(trueQuality, sigma, rng));
  return median(scores);
}

/** One judge call's score: rounded and clamped like a real judge's. */
export function noisyScore(trueQuality: number, sigma: number, rng: Rng): number {
  return Math.max(0, Math.min(100, Math.round(trueQuality + sigma * gaussian(rng))));
}

export function isWrong(decision: RefinementDecision, trueQuality: number): boolean {
  const good = trueQuality >= ACCEPTANCE_THRESHOLD;
  return decision === 'accept' ? !good : good;
}

/**
 * Runs `sessions` refinement loops. The truth (first qualities, replan gains) comes from
 * `truthSeed` and the judge's noise from `noiseSeed`, so variants compared on the same seeds
 * see the same plans.
 */
export function simulateJudgeNoise(options: {
  model: NoiseModel;
  variant: JudgingVariant;
  refinement: RefinementConfig;
  sessions: number;
  truthSeed: number;
  noiseSeed: number;
}): NoiseOutcome {
  const { model, variant, sessions } = options;
  const config: RefinementConfig = {
    ...options.refinement,
    noiseThreshold: variant.noiseThreshold,
    ...(variant.deltaThreshold !== undefined
      ? { deltaThreshold: variant.deltaThreshold, deltaThresholdPercent: variant.deltaThreshold }
      : {}),
  };
  const truth = seededRng(options.truthSeed);
  const noise = seededRng(options.noiseSeed);
  const tally = (): DecisionTally => ({ count: 0, wrong: 0 });
  const outcome: NoiseOutcome = {
    sessions,
    decisions: 0,
    byDecision: { accept: tally(), replan: tally(), reject: tally() },
    wrongOutcomes: 0,
    llmCalls: 0,
    judgeCalls: 0,
  };

  let pool: NoisePool = { sumSquares: 0, degrees: 0 };
  for (let s = 0; s < sessions; s += 1) {
    if (variant.forgetEvery !== undefined && s % variant.forgetEvery === 0) {
      pool = { sumSquares: 0, degrees: 0 };
    }
    // Whole points, like the judge's scores: a judge without noise is then exactly right.
    let quality = Math.round(uniform(truth, ...model.firstQuality));
    // Draw every gain up front so the truth of a session does not depend on the variant.
    const gains = Array.from({ length: config.maxRefinementAttempts + 1 }, () =>
      Math.round(uniform(truth, ...model.replanGain)),
    );
    let previousScore: number | undefined;
    let attemptCount = 0;
    let suggestionReplanCount = 0;
    for (let attempt = 0; ; attempt += 1) {
      let score: number;
      if (variant.adaptive) {
        const context = { previousScore, attemptCount, suggestionReplanCount, refinement: config };
        const prior = noisePrior(pool, variant.adaptive);
        const scores = [noisyScore(quality, model.sigma, noise)];
        for (;;) {
          const step = nextJudgeStep(scores, context, variant.adaptive, prior);
          if (!step.again) {
            score = step.estimate;
            break;
          }
          scores.push(noisyScore(quality, model.sigma, noise));
        }
        // What adaptiveJudge adds to the judge's memory (unused with learnNoise off).
        pool = addSpread(pool, spreadOf(scores));
        outcome.llmCalls += 1 + scores.length;
        outcome.judgeCalls += scores.length;
      } else {
        outcome.llmCalls += 1 + variant.k; // one plan, k judgements
        outcome.judgeCalls += variant.k;
        score = judgeScore(quality, model.sigma, variant.k, noise);
      }
      const acceptable = score >= ACCEPTANCE_THRESHOLD;
      const result = makeRefinementDecision({
        isAcceptable: acceptable,
        score,
        ...(previousScore !== undefined ? { previousScore } : {}),
        issues: acceptable ? [] : [`score ${score} is below ${ACCEPTANCE_THRESHOLD}`],
        suggestions: [],
        attemptCount,
        suggestionReplanCount,
        config,
      });
      const wrong = isWrong(result.decision, quality);
      outcome.decisions += 1;
      outcome.byDecision[result.decision].count += 1;
      if (wrong) outcome.byDecision[result.decision].wrong += 1;
      if (result.decision !== 'replan') {
        if (wrong) outcome.wrongOutcomes += 1;
        break;
      }
      ({ attemptCount, suggestionReplanCount } = advanceRefinementCounters(result));
      previousScore = score;
      quality = Math.min(100, quality + (gains[attempt] ?? 0));
    }
  }
  return outcome;
}
