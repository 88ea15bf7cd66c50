import type { RefinementConfig } from '../config/schema.js';
import type { RefinementDecision } from '../domain/refinement.js';
import { makeRefinementDecision } from './refinement.js';

/**
 * Adaptive judging (issue 38): a sequential test on the plan judge's scores. The judge is asked
 * once; it is asked again only while a decision line of the refinement rule (the acceptance
 * score, or a stagnation line drawn from the previous score) lies within a margin of the mean
 * score, where a different score could change the decision. The margin shrinks with every
 * sample (z·σ/n^marginExponent) and σ is estimated from the spread the samples show, starting
 * from a prior. With learnNoise the prior is learned: the spread of the repeated scores of the
 * same judge's earlier plans is pooled (a scaled-inverse-χ² update of priorSigma), so the margin
 * narrows for a judge that proves consistent and widens for a noisy one.
 * Pure: the caller makes the calls and keeps the pool.
 */

export interface AdaptiveJudgingSettings {
  /** Hard cap on judge calls for one plan, the first included. */
  maxCalls: number;
  /** The score the judge is told marks an acceptable plan (plan-judge prompt: 70). */
  acceptanceScore: number;
  /** The judge's noise (score points, one standard deviation) assumed before samples show it. */
  priorSigma: number;
  /** Width of the margin at the first call, in σ; it shrinks with every call. */
  z: number;
  /**
   * The margin after n calls is z·σ/n^marginExponent: 0.5 is a confidence interval, 1 Wald's
   * sequential test (a boundary constant in the sum of the scores), which stops earlier.
   */
  marginExponent: number;
  /** Learn σ from the repeated scores of the same judge's earlier plans (a NoisePool). */
  learnNoise: boolean;
  /**
   * At most this many samples' worth (degrees of freedom) of earlier plans' spread weigh in the
   * learned σ, so priorSigma keeps a small weight (a judge seen quiet is still asked again at
   * a score right on the line) and a pool of thousands of plans leaves a plan's own scores a say.
   */
  learnedWeight: number;
  /**
   * Also test the stagnation and noise lines drawn from the previous score. They only choose
   * between replan and reject of an unacceptable plan (and name the reason), so they cost calls
   * without changing whether a plan is accepted.
   */
  stagnationLines: boolean;
}

/** What the refinement decision will see besides the score (the session's planning counters). */
export interface DecisionContext {
  previousScore?: number | undefined;
  attemptCount: number;
  suggestionReplanCount: number;
  refinement: RefinementConfig;
}

/** Weight of priorSigma, in samples (degrees of freedom), in the estimate of σ. */
export const PRIOR_WEIGHT = 2;

/**
 * The spread of repeated scores seen so far from one judge: the sum of squared deviations from
 * each plan's own mean, and its degrees of freedom (calls minus one, summed over plans).
 */
export interface NoisePool {
  sumSquares: number;
  degrees: number;
}

/** What σ is believed to be before a plan's own samples: a value and its weight in samples. */
export interface NoisePrior {
  sigma: number;
  weight: number;
  /** Degrees of freedom of earlier plans' spread counted in it (0: priorSigma alone). */
  learnedFrom: number;
}

export function mean(values: readonly number[]): number {
  if (values.length === 0) throw new RangeError('mean of an empty list');
  return values.reduce((a, b) => a + b, 0) / values.length;
}

/** One plan's scores as a pool entry: their squared deviations from their mean. */
export function spreadOf(scores: readonly number[]): NoisePool {
  if (scores.length === 0) return { sumSquares: 0, degrees: 0 };
  const m = mean(scores);
  return {
    sumSquares: scores.reduce((sum, s) => sum + (s - m) ** 2, 0),
    degrees: scores.length - 1,
  };
}

/** Two pools as one (what the memory of a judge's spread adds up). */
export function addSpread(pool: NoisePool, more: NoisePool): NoisePool {
  return { sumSquares: pool.sumSquares + more.sumSquares, degrees: pool.degrees + more.degrees };
}

/**
 * The prior on σ for the next plan: priorSigma with PRIOR_WEIGHT pseudo-samples, updated with
 * the pool (conjugate scaled-inverse-χ²: weights add, so do weighted variances). Beyond
 * learnedWeight degrees of freedom the pool counts as that many, at its own mean square.
 */
export function noisePrior(
  pool: NoisePool | undefined,
  settings: Pick<AdaptiveJudgingSettings, 'priorSigma' | 'learnNoise' | 'learnedWeight'>,
): NoisePrior {
  const degrees = settings.learnNoise && pool ? pool.degrees : 0;
  if (!pool || degrees <= 0) {
    return { sigma: settings.priorSigma, weight: PRIOR_WEIGHT, learnedFrom: 0 };
  }
  const counted = Math.min(degrees, settings.learnedWeight);
  const squares = (pool.sumSquares * counted) / degrees;
  const weight = PRIOR_WEIGHT + counted;
  return {
    sigma: Math.sqrt((PRIOR_WEIGHT * settings.priorSigma ** 2 + squares) / weight),
    weight,
    learnedFrom: degrees,
  };
}

/** σ from the samples' spread, pooled with the prior so that two equal scores do not mean σ = 0. */
export function estimateSigma(
  scores: readonly number[],
  priorSigma: number,
  priorWeight: number = PRIOR_WEIGHT,
): number {
  const { sumSquares, degrees } = spreadOf(scores);
  return Math.sqrt((priorWeight * priorSigma ** 2 + sumSquares) / (priorWeight + degrees));
}

/** A line of the refinement rule: crossing it can change the decision. */
export interface DecisionLine {
  score: number;
  /** What the line is, for the history: "acceptance score 70", "stagnation line 65 (...)". */
  name: string;
}

function formatNumber(value: number): string {
  return Number.isInteger(value) ? String(value) : String(Number(value.toFixed(2)));
}

/** Every score where the refinement rule can change its mind, for this plan's context. */
export function decisionLines(
  context: DecisionContext,
  settings: Pick<AdaptiveJudgingSettings, 'acceptanceScore' | 'stagnationLines'>,
): DecisionLine[] {
  const lines: DecisionLine[] = [
    { score: settings.acceptanceScore, name: `acceptance score ${settings.acceptanceScore}` },
  ];
  const p = context.previousScore;
  if (p === undefined || !settings.stagnationLines) return lines;
  const { deltaThreshold, deltaThresholdPercent, noiseThreshold } = context.refinement;
  const previous = `previous score ${formatNumber(p)}`;
  lines.push({
    score: p + deltaThreshold,
    name: `stagnation line ${formatNumber(p + deltaThreshold)} (${previous} + deltaThreshold ${formatNumber(deltaThreshold)})`,
  });
  if (p > 0) {
    // Multiply before dividing, as refinement.ts does, so 5 % of 60 is exactly 63.
    const relative = p + (p * deltaThresholdPercent) / 100;
    lines.push({
      score: relative,
      name: `stagnation line ${formatNumber(relative)} (${previous} + deltaThresholdPercent ${formatNumber(deltaThresholdPercent)}%)`,
    });
  }
  for (const sign of [1, -1]) {
    const line = p + sign * noiseThreshold;
    lines.push({
      score: line,
      name: `noise line ${formatNumber(line)} (${previous} ${sign > 0 ? '+' : '-'} noiseThreshold ${formatNumber(noiseThreshold)})`,
    });
  }
  return lines;
}

/** The decision the refinement rule would make at `score`, the judge's verdict following it. */
export function decisionAt(
  score: number,
  context: DecisionContext,
  settings: Pick<AdaptiveJudgingSettings, 'acceptanceScore'>,
): RefinementDecision {
  const acceptable = score >= settings.acceptanceScore;
  return makeRefinementDecision({
    isAcceptable: acceptable,
    score,
    ...(context.previousScore !== undefined ? { previousScore: context.previousScore } : {}),
    issues: [],
    suggestions: [],
    attemptCount: context.attemptCount,
    suggestionReplanCount: context.suggestionReplanCount,
    config: context.refinement,
  }).decision;
}

export type JudgeStep =
  | { again: false; reason: string; estimate: number; margin: number }
  | { again: true; reason: string; estimate: number; margin: number; line: DecisionLine };

/**
 * After the scores so far: ask the judge again, or stop. Again when a line where the decision
 * changes lies within the margin of the mean score (the nearest such line is named), while
 * calls remain under maxCalls. `prior` is σ's prior (noisePrior); priorSigma alone without it.
 */
export function nextJudgeStep(
  scores: readonly number[],
  context: DecisionContext,
  settings: AdaptiveJudgingSettings,
  prior: NoisePrior = noisePrior(undefined, settings),
): JudgeStep {
  const n = scores.length;
  // Judges score in whole points, and so does the aggregate: a line L is crossed where the
  // rounded mean reaches ceil(L), i.e. at the mean ceil(L) - 0.5.
  const average = mean(scores);
  const estimate = Math.round(average);
  const sigma = estimateSigma(scores, prior.sigma, prior.weight);
  const margin = (settings.z * sigma) / n ** settings.marginExponent;
  const at = (s: number) => decisionAt(s, context, settings);
  // The rule is constant between lines, so a line changes the decision when the sides differ.
  const deciding = decisionLines(context, settings)
    .filter((line) => Math.abs(Math.ceil(line.score) - 0.5 - average) < margin)
    .filter((line) => at(line.score - 1e-6) !== at(line.score))
    .sort((a, b) => Math.abs(a.score - average) - Math.abs(b.score - average));
  const learned =
    prior.learnedFrom > 0
      ? `, learned from ${formatNumber(prior.learnedFrom)} repeated calls on earlier plans`
      : '';
  const mine = `mean score ${formatNumber(average)} of ${n} call${n === 1 ? '' : 's'}, margin ±${formatNumber(margin)} (σ ≈ ${formatNumber(sigma)}${learned})`;
  const nearest = deciding[0];
  if (!nearest) {
    return {
      again: false,
      reason: `${mine}: no line that changes the decision within it`,
      estimate,
      margin,
    };
  }
  if (n >= settings.maxCalls) {
    return {
      again: false,
      reason: `${mine} reaches the ${nearest.name}, but maxCalls ${settings.maxCalls} are used`,
      estimate,
      margin,
    };
  }
  return {
    again: true,
    reason: `${mine} reaches the ${nearest.name}: asking again`,
    estimate,
    margin,
    line: nearest,
  };
}
