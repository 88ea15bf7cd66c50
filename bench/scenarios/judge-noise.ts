import { parseConfig } from '../../src/shared/config/load.js';
import type { z } from 'zod';
import { AdaptiveJudgingConfig } from '../../src/shared/config/schema.js';
import type { BenchContext, BenchScenario } from '../lib/context.js';
import {
  simulateJudgeNoise,
  type JudgingVariant,
  type NoiseModel,
  type NoiseOutcome,
} from '../lib/judge-noise.js';
import { log } from '../lib/report.js';
import { median } from '../lib/stats.js';
import { simulateTaskVerdicts, TRUE_VERDICT_SHARES } from '../lib/task-verdicts.js';

const SIGMAS = [0, 2, 5, 10];

/**
 * noiseThreshold's schema minimum is 1, so 1 stands for "off" (only equal scores are noise).
 * With the default deltaThreshold (5) every change under 3 points is also stagnation, and both
 * rules decide alike; the `nostag_` variants set deltaThreshold and deltaThresholdPercent to 0
 * so that noiseThreshold's own effect shows.
 */
/** Adaptive judging's first defaults (2026-11-27 05:19 run), before the noise was learned. */
const FIRST_VERSION = { z: 1.4, marginExponent: 0.75, learnNoise: false } as const;

export const VARIANTS: JudgingVariant[] = [
  { key: 'nt3_k1', noiseThreshold: 3, k: 1 },
  { key: 'nt1_k1', noiseThreshold: 1, k: 1 },
  { key: 'nt3_k3', noiseThreshold: 3, k: 3 },
  { key: 'nt3_k5', noiseThreshold: 3, k: 5 },
  { key: 'nostag_nt3_k1', noiseThreshold: 3, k: 1, deltaThreshold: 0 },
  { key: 'nostag_nt1_k1', noiseThreshold: 1, k: 1, deltaThreshold: 0 },
  // Adaptive judging (issue 38), the refinement settings the defaults. `adaptive`: its defaults,
  // the noise learned over the run's sessions (one judge, one Redis); `adaptive_fresh100`: the
  // same with the memory emptied every 100 sessions; `adaptive_nolearn`: priorSigma and the
  // plan's own scores only; `adaptive_v1` / `adaptive_v1_ps5`: the first version's defaults
  // (z 1.4, margin exponent 0.75, nothing learned), with priorSigma 7.5 and 5.
  { key: 'adaptive', noiseThreshold: 3, k: 1, adaptive: adaptiveSettings({}) },
  {
    key: 'adaptive_fresh100',
    noiseThreshold: 3,
    k: 1,
    adaptive: adaptiveSettings({}),
    forgetEvery: 100,
  },
  {
    key: 'adaptive_nolearn',
    noiseThreshold: 3,
    k: 1,
    adaptive: adaptiveSettings({ learnNoise: false }),
  },
  { key: 'adaptive_v1', noiseThreshold: 3, k: 1, adaptive: adaptiveSettings(FIRST_VERSION) },
  {
    key: 'adaptive_v1_ps5',
    noiseThreshold: 3,
    k: 1,
    adaptive: adaptiveSettings({ ...FIRST_VERSION, priorSigma: 5 }),
  },
  {
    key: 'adaptive_stag',
    noiseThreshold: 3,
    k: 1,
    adaptive: adaptiveSettings({ stagnationLines: true }),
  },
];

function adaptiveSettings(input: z.input<typeof AdaptiveJudgingConfig>): AdaptiveJudgingConfig {
  return AdaptiveJudgingConfig.parse(input);
}

const rate = (n: number, of: number) => (of > 0 ? n / of : 0);

function context(outcome: NoiseOutcome, variant: JudgingVariant, model: NoiseModel) {
  const { byDecision, decisions } = outcome;
  return {
    sigma: model.sigma,
    noise: `gaussian, sigma ${model.sigma} score points`,
    truth: `first plan uniform ${model.firstQuality.join('-')}, +${model.replanGain.join('-')} per replan`,
    noiseThreshold: variant.noiseThreshold,
    ...(variant.noiseThreshold === 1 ? { noiseThreshold_note: '1 = off (schema minimum)' } : {}),
    ...(variant.deltaThreshold !== undefined
      ? {
          deltaThreshold: variant.deltaThreshold,
          deltaThresholdPercent: variant.deltaThreshold,
          stagnation_note: 'stagnation thresholds set to 0: only a worse score is stagnation',
        }
      : {}),
    ...(variant.adaptive
      ? {
          judging: 'adaptive',
          ...Object.fromEntries(
            Object.entries(variant.adaptive).map(([key, value]) => [`adaptive_${key}`, value]),
          ),
          ...(variant.forgetEvery !== undefined
            ? { noise_memory: `emptied every ${variant.forgetEvery} sessions` }
            : {}),
          judge_calls_per_plan: outcome.judgeCalls / decisions,
        }
      : {
          judging: variant.k === 1 ? 'single judge' : `median of ${variant.k}`,
          judge_calls_per_plan: variant.k,
        }),
    sessions: outcome.sessions,
    decisions,
    wrong_accept_rate: rate(byDecision.accept.wrong, decisions),
    wrong_replan_rate: rate(byDecision.replan.wrong, decisions),
    wrong_reject_rate: rate(byDecision.reject.wrong, decisions),
    accepts: byDecision.accept.count,
    replans: byDecision.replan.count,
    rejects: byDecision.reject.count,
    wrong_outcome_rate: rate(outcome.wrongOutcomes, outcome.sessions),
  };
}

/**
 * Task verdicts (issue 38): a task judge right with probability `accuracy`, with and without a
 * confirming second opinion on replan and blocked; the wrong verdicts acted on and the calls.
 */
function taskVerdicts(ctx: BenchContext): void {
  const verdicts = ctx.quick ? 20_000 : 200_000;
  for (const accuracy of [0.8, 0.9, 0.95]) {
    for (const [key, confirm] of [
      ['single', []],
      ['confirm_costly', ['replan', 'blocked']],
    ] as const) {
      const outcome = simulateTaskVerdicts({
        accuracy,
        confirm,
        verdicts,
        truthSeed: 3000,
        noiseSeed: 4000 + Math.round(accuracy * 100),
      });
      const fields = {
        accuracy,
        judge: `right with probability ${accuracy}, otherwise one of the other three verdicts`,
        truth: Object.entries(TRUE_VERDICT_SHARES)
          .map(([v, share]) => `${v} ${share}`)
          .join(', '),
        confirm: confirm.length > 0 ? confirm.join(', ') : 'none',
        verdicts,
        judge_calls_per_verdict: outcome.judgeCalls / verdicts,
        wrong_rate: outcome.wrong / verdicts,
        wrong_costly_rate: outcome.wrongCostly / verdicts,
        missed_costly_rate: outcome.missedCostly / verdicts,
      };
      const base = `judge_noise.task_verdicts.accuracy_${accuracy}.${key}`;
      ctx.reporter.record({
        name: `${base}.wrong_costly_rate`,
        value: outcome.wrongCostly / verdicts,
        unit: 'ratio',
        ...fields,
      });
      ctx.reporter.record({
        name: `${base}.judge_calls_per_verdict`,
        value: outcome.judgeCalls / verdicts,
        unit: 'calls',
        ...fields,
      });
    }
  }
  log(`task verdicts: 3 accuracies × 2 variants × ${verdicts} verdicts`);
}

/** Runs per cell, on different truth and noise seeds: the value is their median. */
const RUNS = 5;

/**
 * 4. Judge noise: the seeds' refinement rules driven by a simulated judge whose score is the
 * true quality plus gaussian noise; wrong decisions against the true quality and the calls
 * spent. Each cell is the median of RUNS runs on different seeds (`runs` lists them, `spread`
 * is their range). Pure computation, no Redis.
 */
async function run(ctx: BenchContext): Promise<void> {
  const sessions = ctx.quick ? 5_000 : 50_000;
  const runs = ctx.quick ? 2 : RUNS;
  const refinement = parseConfig({}).refinement;
  for (const sigma of SIGMAS) {
    const model: NoiseModel = { sigma, firstQuality: [40, 100], replanGain: [0, 15] };
    const cells = VARIANTS.map(() => [] as { outcome: NoiseOutcome; seedsCalls: number }[]);
    for (let r = 0; r < runs; r += 1) {
      let seedsCalls: number | undefined; // nt3_k1, the seeds' rule, comes first
      VARIANTS.forEach((variant, v) => {
        const outcome = simulateJudgeNoise({
          model,
          variant,
          refinement,
          sessions,
          // Run 0 keeps the seeds of the single-run benchmark, so its figures stay comparable.
          truthSeed: 1000 + sigma + r * 101,
          noiseSeed: 2000 + sigma + r * 101,
        });
        seedsCalls ??= outcome.llmCalls;
        cells[v]?.push({ outcome, seedsCalls });
      });
    }
    VARIANTS.forEach((variant, v) => {
      const results = cells[v] ?? [];
      const wrongRates = results.map(({ outcome }) => wrongRate(outcome));
      const callsPerSession = results.map(({ outcome }) => outcome.llmCalls / outcome.sessions);
      const vsSeeds = results.map(({ outcome, seedsCalls }) => outcome.llmCalls / seedsCalls);
      const middle = results[medianIndex(wrongRates)] as (typeof results)[number];
      const ctxFields = { ...context(middle.outcome, variant, model), runs };
      const base = `judge_noise.sigma_${sigma}.${variant.key}`;
      ctx.reporter.record({
        name: `${base}.wrong_decision_rate`,
        value: median(wrongRates),
        unit: 'ratio',
        ...ctxFields,
        ...spreadOf(wrongRates),
      });
      ctx.reporter.record({
        name: `${base}.llm_calls_per_session`,
        value: median(callsPerSession),
        unit: 'calls',
        ...ctxFields,
        ...spreadOf(callsPerSession),
      });
      if (variant.adaptive) {
        // The goal of issue 38 is stated against the seeds' rule's calls, on the same seeds.
        ctx.reporter.record({
          name: `${base}.llm_calls_vs_seeds`,
          value: median(vsSeeds),
          unit: 'ratio',
          ...ctxFields,
          ...spreadOf(vsSeeds),
        });
      }
    });
    log(
      `judge noise sigma ${sigma}: ${VARIANTS.length} variants × ${runs} runs × ${sessions} sessions`,
    );
  }
  taskVerdicts(ctx);
  // No Redis, no processes: yield once so the JSON lines flush in order with the others.
  await Promise.resolve();
}

function wrongRate(outcome: NoiseOutcome): number {
  const { accept, replan, reject } = outcome.byDecision;
  return rate(accept.wrong + replan.wrong + reject.wrong, outcome.decisions);
}

/** Every run's value, and their range. */
function spreadOf(values: readonly number[]): { run_values: number[]; spread: [number, number] } {
  return { run_values: [...values], spread: [Math.min(...values), Math.max(...values)] };
}

/** The index of a median value (the lower middle for an even count), for its run's details. */
function medianIndex(values: readonly number[]): number {
  const order = values.map((value, index) => ({ value, index })).sort((a, b) => a.value - b.value);
  return order[Math.floor((order.length - 1) / 2)]?.index ?? 0;
}

export const judgeNoise: BenchScenario = {
  name: 'noise',
  description: 'wrong accept/replan/reject rates and LLM calls under a noisy judge (no Redis)',
  run,
};
