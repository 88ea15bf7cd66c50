import { describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/shared/config/load.js';
import { AdaptiveJudgingConfig } from '../../src/shared/config/schema.js';
import { findCycles, findDanglingDependencies } from '../../src/shared/rules/structure.js';
import { escapeXml, niceTop, renderFigure } from '../../bench/lib/chart.js';
import {
  isWrong,
  judgeScore,
  simulateJudgeNoise,
  type NoiseModel,
} from '../../bench/lib/judge-noise.js';
import { chain, fanOut, independentTasks, lattice, randomDag } from '../../bench/lib/plans.js';
import { seededRng } from '../../bench/lib/random.js';
import { pairedSummary, pairOrder } from '../../bench/lib/paired.js';
import { fileStamp } from '../../bench/lib/report.js';
import { summaryFigure } from '../../bench/lib/summary-chart.js';
import { mean, percentile } from '../../bench/lib/stats.js';

const asPlanned = (tasks: ReturnType<typeof chain>) =>
  tasks.map((t) => ({ ...t, context: '', scopePaths: [], dependencies: t.dependencies ?? [] }));

describe('bench statistics', () => {
  it('interpolates percentiles between ranks', () => {
    expect(percentile([1, 2, 3, 4], 50)).toBe(2.5);
    expect(percentile([5, 1, 3], 0)).toBe(1);
    expect(percentile([5, 1, 3], 100)).toBe(5);
    expect(percentile([10, 20], 95)).toBeCloseTo(19.5);
    expect(percentile([], 50)).toBeNaN();
    expect(mean([1, 2, 6])).toBe(3);
  });
});

describe('paired rounds (bench:compare)', () => {
  it('runs base first in even rounds and change first in odd ones', () => {
    expect([0, 1, 2, 3].map(pairOrder)).toEqual([
      ['base', 'change'],
      ['change', 'base'],
      ['base', 'change'],
      ['change', 'base'],
    ]);
  });

  it("takes the median of each round's change over base, not the ratio of the medians", () => {
    // The machine slows down over the run: every round's change costs 90 % of its base.
    const base = [100, 200, 400];
    const change = [90, 180, 360];
    const summary = pairedSummary(base, change);
    expect(summary.ratio).toBeCloseTo(0.9);
    expect(summary.low).toBeCloseTo(0.9);
    expect(summary.high).toBeCloseTo(0.9);
    expect(summary).toMatchObject({ rounds: 3, baseMedian: 200, changeMedian: 180 });
    // Unpaired, a drifting machine blurs the comparison: [50, 90, 600] against the same base
    // has medians 90 and 200 (0.45), while the rounds' own ratios say 0.5, 0.45 and 1.5.
    expect(pairedSummary(base, [50, 90, 600])).toMatchObject({ ratio: 0.5, low: 0.45, high: 1.5 });
  });

  it('gives the middle half of the round ratios', () => {
    const summary = pairedSummary([10, 10, 10, 10, 10], [8, 9, 10, 11, 30]);
    expect(summary).toMatchObject({ ratio: 1, low: 0.8, high: 3 });
    expect(summary.q1).toBeCloseTo(0.9);
    expect(summary.q3).toBeCloseTo(1.1);
  });

  it('refuses samples that do not pair up', () => {
    expect(() => pairedSummary([1, 2], [1])).toThrow(/equal, non-zero counts/);
    expect(() => pairedSummary([], [])).toThrow(/equal, non-zero counts/);
  });
});

describe('bench plan shapes', () => {
  it('builds the chain, fan-out and lattice with the intended edges', () => {
    expect(chain(3).map((t) => t.dependencies)).toEqual([[], ['t00000'], ['t00001']]);
    const fan = fanOut(4);
    expect(fan).toHaveLength(5);
    expect(fan.slice(1).every((t) => t.dependencies?.[0] === 'root')).toBe(true);
    const grid = lattice(3, 4);
    expect(grid).toHaveLength(12);
    expect(grid.slice(4).every((t) => t.dependencies?.length === 2)).toBe(true);
    expect(independentTasks(3).every((t) => t.dependencies?.length === 0)).toBe(true);
  });

  it('makes seeded random DAGs with bounded in-degree, no cycles and no dangling ids', () => {
    const dag = randomDag(500, 42, 3, 64);
    expect(randomDag(500, 42, 3, 64)).toEqual(dag);
    expect(dag.every((t) => (t.dependencies?.length ?? 0) <= 3)).toBe(true);
    expect(new Set(dag.map((t) => t.id)).size).toBe(500);
    expect(findCycles(asPlanned(dag))).toEqual([]);
    expect(findDanglingDependencies(asPlanned(dag))).toEqual([]);
    expect(dag.some((t) => (t.dependencies?.length ?? 0) > 0)).toBe(true);
  });
});

describe('judge noise simulation', () => {
  const refinement = parseConfig({}).refinement;
  const model = (sigma: number): NoiseModel => ({
    sigma,
    firstQuality: [40, 100],
    replanGain: [0, 15],
  });

  it('calls a decision wrong against the true quality and 70', () => {
    expect(isWrong('accept', 69.9)).toBe(true);
    expect(isWrong('accept', 70)).toBe(false);
    expect(isWrong('replan', 75)).toBe(true);
    expect(isWrong('replan', 50)).toBe(false);
    expect(isWrong('reject', 80)).toBe(true);
    expect(isWrong('reject', 60)).toBe(false);
  });

  it('takes the median of k noisy scores, clamped to 0..100', () => {
    const rng = seededRng(1);
    expect(judgeScore(72.4, 0, 5, rng)).toBe(72);
    expect(judgeScore(99, 50, 1, seededRng(3))).toBeLessThanOrEqual(100);
  });

  it('is deterministic, counts one plan plus k judgements per round, and errs more with more noise', () => {
    const run = (sigma: number, k: number) =>
      simulateJudgeNoise({
        model: model(sigma),
        variant: { key: 'x', noiseThreshold: 3, k },
        refinement,
        sessions: 2_000,
        truthSeed: 7,
        noiseSeed: 8,
      });
    const quiet = run(0, 1);
    expect(run(0, 1)).toEqual(quiet);
    const rounds = quiet.decisions;
    expect(quiet.llmCalls).toBe(rounds * 2);
    expect(run(0, 3).llmCalls).toBe(run(0, 3).decisions * 4);
    const wrong = (o: ReturnType<typeof run>) =>
      o.byDecision.accept.wrong + o.byDecision.replan.wrong + o.byDecision.reject.wrong;
    // True qualities are whole points, so a judge without noise never decides wrong.
    expect(wrong(quiet)).toBe(0);
    expect(wrong(run(10, 1))).toBeGreaterThan(wrong(run(2, 1)));
    expect(wrong(run(10, 5))).toBeLessThan(wrong(run(10, 1)));
    // Every session ends in exactly one accept or reject, within the attempt budget.
    expect(quiet.byDecision.accept.count + quiet.byDecision.reject.count).toBe(2_000);
    expect(rounds).toBeLessThanOrEqual(2_000 * (refinement.maxRefinementAttempts + 1));
  });

  it("learns a quiet judge's noise over the run's sessions unless told to forget it", () => {
    const run = (learnNoise: boolean, forgetEvery?: number) =>
      simulateJudgeNoise({
        model: model(0),
        variant: {
          key: 'x',
          noiseThreshold: 3,
          k: 1,
          adaptive: AdaptiveJudgingConfig.parse({ learnNoise }),
          ...(forgetEvery !== undefined ? { forgetEvery } : {}),
        },
        refinement,
        sessions: 2_000,
        truthSeed: 7,
        noiseSeed: 8,
      }).judgeCalls;
    // A judge that never varies: learned, the margin narrows and fewer plans are asked twice.
    expect(run(true)).toBeLessThan(run(false) * 0.85);
    // Forgetting every 10 sessions keeps it nearer priorSigma's margin.
    expect(run(true, 10)).toBeGreaterThan(run(true));
    expect(run(true, 10)).toBeLessThan(run(false));
  });
});

describe('bench chart and report helpers', () => {
  it('renders an SVG with escaped labels and round axis tops', () => {
    expect(niceTop(0.83)).toBe(1);
    expect(niceTop(4460)).toBe(5000);
    expect(niceTop(2.76)).toBe(5);
    expect(escapeXml('a < b & "c"')).toBe('a &#60; b &#38; &#34;c&#34;');
    const svg = renderFigure({
      title: 'T <1>',
      subtitle: 's',
      panels: [
        {
          title: 'p',
          unit: 'u',
          groups: [{ label: 'g', bars: [{ series: 'orq', value: 2 }] }],
          refLines: [{ value: 1, label: 'ideal' }],
        },
      ],
    });
    expect(svg.startsWith('<svg')).toBe(true);
    expect(svg).toContain('T &#60;1&#62;');
    expect(svg).toContain('ideal');
    expect(svg.trim().endsWith('</svg>')).toBe(true);
  });

  it('charts the start-up times that were measured, and no start-up panel without them', () => {
    const run = { startedAt: '2026-11-21T13:00:00Z', quick: true, machine: {} };
    const ms = (name: string, value: number) => ({ name: `startup.${name}_ms`, value, unit: 'ms' });
    const figure = summaryFigure(
      [ms('node', 100), ms('orq_version', 650), ms('orq_status', 700), ms('orq_start_ready', 750)],
      run,
    );
    const panel = figure.panels.find((p) => p.title.startsWith('6. Start-up'));
    expect(panel?.groups.map((g) => [g.label, g.bars[0]?.value])).toEqual([
      ['node', 100],
      ['orq version', 650],
      ['orq status', 700],
      ['orq start ready', 750],
    ]);
    expect(summaryFigure([], run).panels).toEqual([]);
  });

  it('stamps result files without colons', () => {
    expect(fileStamp(new Date('2026-11-01T04:50:00.123Z'))).toBe('2026-11-01T04-50-00Z');
  });
});
