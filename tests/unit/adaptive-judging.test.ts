import { describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/shared/config/load.js';
import { AdaptiveJudgingConfig } from '../../src/shared/config/schema.js';
import {
  addSpread,
  decisionLines,
  estimateSigma,
  nextJudgeStep,
  noisePrior,
  PRIOR_WEIGHT,
  spreadOf,
  type DecisionContext,
  type NoisePool,
} from '../../src/shared/rules/adaptive-judging.js';

const refinement = parseConfig({}).refinement;
const settings = AdaptiveJudgingConfig.parse({});
const first: DecisionContext = { attemptCount: 0, suggestionReplanCount: 0, refinement };

describe('adaptive judging: when to ask the judge again', () => {
  it('stops after one call when the score is far from every line', () => {
    const step = nextJudgeStep([90], first, settings);
    expect(step.again).toBe(false);
    expect(step.estimate).toBe(90);
    expect(step.reason).toMatch(/no line that changes the decision/);
  });

  it('asks again when the score sits within the margin of the acceptance score', () => {
    const step = nextJudgeStep([72], first, settings);
    expect(step).toMatchObject({ again: true, line: { score: 70 } });
    expect(step.reason).toMatch(/acceptance score 70: asking again/);
  });

  it('narrows the margin with every call, so agreeing scores end it', () => {
    const one = nextJudgeStep([76], first, settings);
    const three = nextJudgeStep([76, 77, 76], first, settings);
    expect(one.again).toBe(true);
    expect(three.again).toBe(false);
    expect(three.margin).toBeLessThan(one.margin);
  });

  it('widens the margin when the samples disagree more than the prior says', () => {
    expect(estimateSigma([60, 80], 7)).toBeGreaterThan(7);
    expect(estimateSigma([70, 70], 7)).toBeLessThan(7);
    expect(nextJudgeStep([74, 76, 75], first, settings).again).toBe(false);
    expect(nextJudgeStep([60, 90, 72], first, settings).again).toBe(true);
  });

  it('stops at maxCalls however close the score is, and says so', () => {
    const step = nextJudgeStep([70, 69], first, { ...settings, maxCalls: 2 });
    expect(step.again).toBe(false);
    expect(step.reason).toMatch(/maxCalls 2 are used/);
  });

  it('tests the line where the rounded mean changes: 69.5 for the acceptance score 70', () => {
    // Mean 69.5 rounds to 70 (acceptable); the line sits exactly there, so it is never far.
    const step = nextJudgeStep([69, 70], first, { ...settings, maxCalls: 2 });
    expect(step.estimate).toBe(70);
  });

  it('still tests the acceptance score once the attempts are spent', () => {
    // Priority 1: accept or reject by the verdict alone; 70 is still the line that matters.
    const spent = { ...first, attemptCount: refinement.maxRefinementAttempts, previousScore: 60 };
    expect(nextJudgeStep([71], spent, settings)).toMatchObject({
      again: true,
      line: { score: 70 },
    });
  });

  it('tests the stagnation lines only when asked to, and only where they change the decision', () => {
    const replan: DecisionContext = { ...first, attemptCount: 1, previousScore: 50 };
    // 56 is unacceptable either way; at 55 (50 + deltaThreshold) reject turns into replan.
    expect(nextJudgeStep([56], replan, settings).again).toBe(false);
    const withLines = { ...settings, stagnationLines: true };
    const step = nextJudgeStep([56], replan, withLines);
    expect(step).toMatchObject({ again: true });
    expect(step.reason).toMatch(/stagnation line 55 \(previous score 50 \+ deltaThreshold 5\)/);
    // An acceptable score is accepted whether stagnated or not: no stagnation line matters.
    expect(nextJudgeStep([95], { ...replan, previousScore: 92 }, withLines).again).toBe(false);
  });

  it('draws the stagnation and noise lines from the previous score', () => {
    const lines = decisionLines(
      { ...first, previousScore: 60 },
      { ...settings, stagnationLines: true },
    );
    expect(lines.map((l) => l.score)).toEqual([70, 65, 63, 63, 57]);
    expect(decisionLines({ ...first, previousScore: 60 }, settings).map((l) => l.score)).toEqual([
      70,
    ]);
  });
});

describe("adaptive judging: learning the judge's noise from earlier plans", () => {
  /** The pool of `plans` plans scored twice by a judge whose two scores differ by `gap`. */
  const pairs = (plans: number, gap: number): NoisePool =>
    Array.from({ length: plans }, () => spreadOf([70, 70 + gap])).reduce(addSpread);

  it("pools each plan's squared deviations from its own mean, with calls minus one", () => {
    expect(spreadOf([70, 74])).toEqual({ sumSquares: 8, degrees: 1 });
    expect(spreadOf([80])).toEqual({ sumSquares: 0, degrees: 0 });
    expect(addSpread(spreadOf([70, 74]), spreadOf([60, 61, 62]))).toEqual({
      sumSquares: 10,
      degrees: 3,
    });
    // Two scores g apart estimate σ² as g²/2.
    expect(Math.sqrt(pairs(10, 4).sumSquares / pairs(10, 4).degrees)).toBeCloseTo(Math.sqrt(8));
  });

  it('starts from priorSigma and moves to the spread seen, priorSigma keeping its weight', () => {
    expect(noisePrior(undefined, settings)).toEqual({
      sigma: settings.priorSigma,
      weight: PRIOR_WEIGHT,
      learnedFrom: 0,
    });
    // Ten plans whose scores differ by 2 (σ² = 2): a conjugate update of 2 pseudo-samples.
    const ten = noisePrior(pairs(10, 2), settings);
    expect(ten.weight).toBe(PRIOR_WEIGHT + 10);
    expect(ten.learnedFrom).toBe(10);
    expect(ten.sigma).toBeCloseTo(Math.sqrt((2 * settings.priorSigma ** 2 + 20) / 12));
    // Noisier scores than priorSigma widen it.
    expect(noisePrior(pairs(10, 30), settings).sigma).toBeGreaterThan(settings.priorSigma);
  });

  it("counts at most learnedWeight repeats, at the pool's own mean square", () => {
    const many = noisePrior(pairs(5000, 2), { ...settings, learnedWeight: 50 });
    expect(many).toMatchObject({ weight: PRIOR_WEIGHT + 50, learnedFrom: 5000 });
    expect(many.sigma).toBeCloseTo(Math.sqrt((2 * settings.priorSigma ** 2 + 50 * 2) / 52));
    // priorSigma's pseudo-samples keep a floor under a judge seen perfectly consistent.
    expect(noisePrior(pairs(5000, 0), settings).sigma).toBeGreaterThan(1);
  });

  it('ignores the pool when learnNoise is off', () => {
    expect(noisePrior(pairs(100, 2), { ...settings, learnNoise: false })).toEqual(
      noisePrior(undefined, settings),
    );
  });

  it('asks a judge proven consistent less, and a noisy one more, and names what it learned', () => {
    const quiet = noisePrior(pairs(100, 2), settings);
    const noisy = noisePrior(pairs(100, 30), settings);
    // 75 is within priorSigma's margin of 70, not within a consistent judge's.
    expect(nextJudgeStep([75], first, settings).again).toBe(true);
    const calm = nextJudgeStep([75], first, settings, quiet);
    expect(calm.again).toBe(false);
    expect(calm.reason).toMatch(/learned from 100 repeated calls on earlier plans/);
    // 84 is outside priorSigma's margin, within a noisy judge's.
    expect(nextJudgeStep([84], first, settings).again).toBe(false);
    expect(nextJudgeStep([84], first, settings, noisy).again).toBe(true);
  });
});
