import type { RefinementConfig } from '../config/schema.js';
import type {
  Feedback,
  RefinementReasonCode,
  RefinementResult,
  ScoreDirection,
} from '../domain/refinement.js';

/**
 * The plan-refinement decision (seed 000, final form in seed 003): given the judge's verdict on
 * a plan and the counters of the session, accept it, replan it with feedback, or reject it.
 * Pure: no I/O, no clock. The coordinator loads the counters, calls this, stores the result.
 */

/** Format a number for a reason sentence: integers as they are, others to two decimals. */
function formatNumber(value: number): string {
  return Number.isInteger(value) ? String(value) : String(Number(value.toFixed(2)));
}

/**
 * Relative improvement in percent, or undefined when it has no meaning.
 *
 * A previous score of 0 (or below) has no meaningful percentage: seed 003's code maps it to 0%,
 * which is always below deltaThresholdPercent and would call 0 → 10 "stagnation", yet seed
 * 003's own test row ("previousScore = 0", score 10) expects a replan for 品質未達. So the
 * relative criterion does not apply there and the absolute one (deltaThreshold) decides alone.
 */
function relativeImprovementPercent(
  currentScore: number,
  previousScore: number,
): number | undefined {
  if (previousScore <= 0) return undefined;
  // Multiply before dividing so integer percentages are exact at the threshold (5 of 50 is 10%).
  return ((currentScore - previousScore) * 100) / previousScore;
}

/**
 * Seed 003 (the "current implementation" of seed 000): the score did not improve enough.
 * Absolute OR relative shortfall counts — seed 000 chose OR so that one large criterion cannot
 * keep the loop alive. False when either score is missing (first plan, or the judge gave none).
 */
export function isStagnated(
  currentScore: number | undefined,
  previousScore: number | undefined,
  config: Pick<RefinementConfig, 'deltaThreshold' | 'deltaThresholdPercent'>,
): boolean {
  if (currentScore === undefined || previousScore === undefined) return false;
  const improvement = currentScore - previousScore;
  const relative = relativeImprovementPercent(currentScore, previousScore);
  return (
    improvement < config.deltaThreshold ||
    (relative !== undefined && relative < config.deltaThresholdPercent)
  );
}

/**
 * Seed 003: the change is larger than the judge's own noise. A missing score counts as
 * significant so that the noise rule never fires on a first plan or a failed judgement;
 * the other priorities decide those.
 */
export function isScoreChangeSignificant(
  currentScore: number | undefined,
  previousScore: number | undefined,
  noiseThreshold: number,
): boolean {
  if (currentScore === undefined || previousScore === undefined) return true;
  return Math.abs(currentScore - previousScore) >= noiseThreshold;
}

/**
 * Seed 003: direction of the score change once noise is discounted, kept in the history.
 * 'unknown' (a score is missing) is distinct from 'stable' (within noise).
 */
export function determineScoreDirection(
  currentScore: number | undefined,
  previousScore: number | undefined,
  noiseThreshold: number,
): ScoreDirection {
  if (currentScore === undefined || previousScore === undefined) return 'unknown';
  const diff = currentScore - previousScore;
  if (Math.abs(diff) < noiseThreshold) return 'stable';
  return diff > 0 ? 'improved' : 'degraded';
}

export interface RefinementDecisionParams {
  /** The judge's verdict on the plan. */
  isAcceptable: boolean;
  /** The judge's score 0–100; undefined when the judge gave none. */
  score?: number;
  /** The score of the plan this one replaced; undefined for the first plan. */
  previousScore?: number;
  issues: string[];
  suggestions: string[];
  /**
   * Quality-driven replans already made in this session (0 when judging the first plan).
   * Every replan except one made only to apply suggestions counts here, stagnation replans
   * included, so priority 1 bounds them all.
   */
  attemptCount: number;
  /** Replans already made only to apply the suggestions on an acceptable plan. */
  suggestionReplanCount: number;
  config: RefinementConfig;
}

/** Why priority 3 fired (noise, or which stagnation criterion), with the numbers involved. */
function describeStagnation(
  score: number,
  previousScore: number,
  isNoise: boolean,
  config: RefinementConfig,
): string {
  const pair = `score ${formatNumber(score)} vs ${formatNumber(previousScore)}`;
  if (isNoise) {
    return `${pair} differs by less than noiseThreshold ${formatNumber(config.noiseThreshold)}`;
  }
  const improvement = score - previousScore;
  const relative = relativeImprovementPercent(score, previousScore);
  const shortfalls: string[] = [];
  if (improvement < config.deltaThreshold) {
    shortfalls.push(
      `improvement ${formatNumber(improvement)} is below deltaThreshold ${formatNumber(config.deltaThreshold)}`,
    );
  }
  if (relative !== undefined && relative < config.deltaThresholdPercent) {
    shortfalls.push(
      `relative improvement ${formatNumber(relative)}% is below deltaThresholdPercent ${formatNumber(config.deltaThresholdPercent)}`,
    );
  }
  return `${pair}: ${shortfalls.join(' and ')}`;
}

function countOf(items: readonly string[], noun: string): string {
  return `${items.length} ${noun}${items.length === 1 ? '' : 's'}`;
}

/**
 * Seed 003's final makeRefinementDecision, priorities 1–6 of seed 000, first match wins:
 * 1 attempts exhausted, 2 no score, 3 stagnation or noise, 4 below quality,
 * 5 acceptable with suggestions to apply, 6 acceptable. With refinement.targetScore set, the
 * target decides acceptable plans between 4 and 5 (DESIGN.md), and 5 is not reached.
 */
export function makeRefinementDecision(params: RefinementDecisionParams): RefinementResult {
  const {
    isAcceptable,
    score,
    previousScore,
    issues,
    suggestions,
    attemptCount,
    suggestionReplanCount,
    config,
  } = params;

  const scoreDirection = determineScoreDirection(score, previousScore, config.noiseThreshold);
  const result = (
    decision: RefinementResult['decision'],
    reasonCode: RefinementReasonCode,
    reason: string,
    feedback?: Feedback,
  ): RefinementResult => ({
    decision,
    reasonCode,
    reason,
    ...(feedback ? { feedback } : {}),
    ...(previousScore !== undefined ? { previousScore } : {}),
    ...(score !== undefined ? { currentScore: score } : {}),
    attemptCount,
    suggestionReplanCount,
    scoreDirection,
  });
  const verdict = isAcceptable
    ? 'plan is acceptable, accepting'
    : 'plan is unacceptable, rejecting';

  // Priority 1: the attempt budget is spent, so the verdict stands as it is (seed 000).
  if (attemptCount >= config.maxRefinementAttempts) {
    return result(
      isAcceptable ? 'accept' : 'reject',
      'max_attempts_reached',
      `${attemptCount} of maxRefinementAttempts ${config.maxRefinementAttempts} refinement attempts used; ${verdict}`,
    );
  }

  // Priority 2: without a score neither stagnation nor improvement can be judged (seed 000 v3.1).
  if (score === undefined) {
    return result(
      isAcceptable ? 'accept' : 'reject',
      'score_unavailable',
      `the judge returned no score; ${verdict}`,
    );
  }

  // Priority 3: stagnation or noise, only once there is a previous score to compare (seed 003).
  if (previousScore !== undefined) {
    const isNoise = !isScoreChangeSignificant(score, previousScore, config.noiseThreshold);
    if (isNoise || isStagnated(score, previousScore, config)) {
      const reasonCode = isNoise ? 'stagnation_noise' : 'stagnation';
      const detail = describeStagnation(score, previousScore, isNoise, config);
      if (isAcceptable) {
        return result('accept', reasonCode, `${detail}; plan is acceptable, accepting`);
      }
      // DESIGN.md: seed 003 (and seed 000's v3.1 review) reject; seed 000's priority list keeps
      // replanning. Attempts necessarily remain here, since priority 1 did not fire.
      if (config.stagnationPolicy === 'replan-while-attempts-remain') {
        return result(
          'replan',
          reasonCode,
          `${detail}; plan is unacceptable, replanning while attempts remain (${attemptCount} of ${config.maxRefinementAttempts} used)`,
          { issues, suggestions },
        );
      }
      return result('reject', reasonCode, `${detail}; plan is unacceptable, rejecting`);
    }
  }

  // Priority 4: below quality, replan with everything the judge said.
  if (!isAcceptable) {
    return result(
      'replan',
      'quality_below_threshold',
      `plan is unacceptable at score ${formatNumber(score)}; replanning with ${countOf(issues, 'issue')} and ${countOf(suggestions, 'suggestion')} (${attemptCount} of ${config.maxRefinementAttempts} attempts used)`,
      { issues, suggestions },
    );
  }

  // Priority 4.5 (the seeds' origin's targetScore, orq's place for it in DESIGN.md): a plan the
  // judge accepts is good enough at the target, and worth its suggestions below it.
  if (config.targetScore !== undefined) {
    const target = formatNumber(config.targetScore);
    if (score >= config.targetScore) {
      return result(
        'accept',
        'target_score_reached',
        `plan is acceptable at score ${formatNumber(score)}, at or above targetScore ${target}; accepting${suggestions.length > 0 ? ` without replanning for ${countOf(suggestions, 'suggestion')}` : ''}`,
      );
    }
    if (suggestions.length > 0 && suggestionReplanCount < config.maxSuggestionReplans) {
      return result(
        'replan',
        'target_score_not_reached',
        `plan is acceptable at score ${formatNumber(score)}, below targetScore ${target}; replanning to apply ${countOf(suggestions, 'suggestion')} (${suggestionReplanCount} of maxSuggestionReplans ${config.maxSuggestionReplans} used)`,
        { issues: [], suggestions },
      );
    }
    const why =
      suggestions.length === 0
        ? 'the judge made no suggestions to replan for'
        : `all ${config.maxSuggestionReplans} of maxSuggestionReplans are used`;
    return result(
      'accept',
      'quality_ok',
      `plan is acceptable at score ${formatNumber(score)}, below targetScore ${target}, and ${why}; accepting`,
    );
  }

  // Priority 5: acceptable, but the suggestions are worth one more plan, within their own budget.
  if (
    suggestions.length > 0 &&
    config.refineSuggestionsOnSuccess &&
    suggestionReplanCount < config.maxSuggestionReplans
  ) {
    return result(
      'replan',
      'apply_suggestions',
      `plan is acceptable at score ${formatNumber(score)}; replanning to apply ${countOf(suggestions, 'suggestion')} (${suggestionReplanCount} of maxSuggestionReplans ${config.maxSuggestionReplans} used)`,
      { issues: [], suggestions },
    );
  }

  // Priority 6.
  return result('accept', 'quality_ok', `plan is acceptable at score ${formatNumber(score)}`);
}

/**
 * The counters to judge the next plan with, after a decision. A replan made only to apply
 * suggestions (for refineSuggestionsOnSuccess or below targetScore) spends the suggestion budget; every other replan (quality or stagnation) spends
 * the attempt budget. Accept and reject end the loop and change nothing.
 */
export function advanceRefinementCounters(result: RefinementResult): {
  attemptCount: number;
  suggestionReplanCount: number;
} {
  const { attemptCount, suggestionReplanCount } = result;
  if (result.decision !== 'replan') return { attemptCount, suggestionReplanCount };
  if (
    result.reasonCode === 'apply_suggestions' ||
    result.reasonCode === 'target_score_not_reached'
  ) {
    return { attemptCount, suggestionReplanCount: suggestionReplanCount + 1 };
  }
  return { attemptCount: attemptCount + 1, suggestionReplanCount };
}

export interface BrokenReplanParams {
  /** Why the replan's structure is broken (validateStructure's problems). */
  problems: readonly string[];
  /** The judge's verdict on the previous plan, the last one with a sound structure. */
  previousAcceptable: boolean;
  previousScore?: number | undefined;
  /** The judge's score of the broken replan. */
  score?: number | undefined;
  /** What the judge asked of the previous plan, to ask for again. */
  previousFeedback?: Feedback | undefined;
  attemptCount: number;
  suggestionReplanCount: number;
  config: RefinementConfig;
}

/**
 * Seed 000: a replan whose structure broke is never run; the previous plan is used instead
 * ("構造破壊時 → ... 前回タスク使用"). It is accepted when the judge found it acceptable
 * (enableIndividualFallback; orq falls back to the whole plan, as a replan's tasks need not keep
 * their ids). Otherwise it goes back to the Planner with the problems and what the judge asked
 * of it, which spends a refinement attempt like any quality replan; with none left, the session
 * fails. So the loop stays bounded by maxRefinementAttempts.
 */
export function decideBrokenReplan(params: BrokenReplanParams): RefinementResult {
  const { problems, previousAcceptable, previousScore, score, attemptCount, config } = params;
  const broken = `replan broke the structure (${problems.join('; ')})`;
  const result = (
    decision: RefinementResult['decision'],
    reason: string,
    feedback?: Feedback,
  ): RefinementResult => ({
    decision,
    reasonCode: 'structure_broken',
    reason,
    ...(feedback ? { feedback } : {}),
    ...(previousScore !== undefined ? { previousScore } : {}),
    ...(score !== undefined ? { currentScore: score } : {}),
    attemptCount,
    suggestionReplanCount: params.suggestionReplanCount,
    scoreDirection: determineScoreDirection(score, previousScore, config.noiseThreshold),
  });

  if (previousAcceptable && config.enableIndividualFallback) {
    return result('accept', `${broken}; falling back to the previous plan, which was acceptable`);
  }
  const previous = previousAcceptable
    ? 'the previous plan was acceptable, but enableIndividualFallback is off'
    : 'the previous plan was not acceptable';
  if (attemptCount < config.maxRefinementAttempts) {
    return result(
      'replan',
      `${broken}; ${previous}: replanning from it (${attemptCount} of ${config.maxRefinementAttempts} attempts used)`,
      {
        issues: [
          `Your last revision broke the plan's structure (${problems.join('; ')}). Revise the previous plan instead, keeping its structure.`,
          ...(params.previousFeedback?.issues ?? []),
        ],
        suggestions: params.previousFeedback?.suggestions ?? [],
      },
    );
  }
  return result(
    'reject',
    `${broken}; ${previous}, and ${attemptCount} of maxRefinementAttempts ${config.maxRefinementAttempts} refinement attempts are used`,
  );
}
