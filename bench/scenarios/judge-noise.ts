import { parseConfig } from '../../src/shared/config/load.js';
import type { BenchContext, BenchScenario } from '../lib/context.js';
import {
  simulateJudgeNoise,
  type JudgingVariant,
  type NoiseModel,
  type NoiseOutcome,
} from '../lib/judge-noise.js';
import { log } from '../lib/report.js';

const SIGMAS = [0, 2, 5, 10];

/**
 * noiseThreshold's schema minimum is 1, so 1 stands for "off" (only equal scores are noise).
 * With the default deltaThreshold (5) every change under 3 points is also stagnation, and both
 * rules decide alike; the `nostag_` variants set deltaThreshold and deltaThresholdPercent to 0
 * so that noiseThreshold's own effect shows.
 */
export const VARIANTS: JudgingVariant[] = [
  { key: 'nt3_k1', noiseThreshold: 3, k: 1 },
  { key: 'nt1_k1', noiseThreshold: 1, k: 1 },
  { key: 'nt3_k3', noiseThreshold: 3, k: 3 },
  { key: 'nt3_k5', noiseThreshold: 3, k: 5 },
  { key: 'nostag_nt3_k1', noiseThreshold: 3, k: 1, deltaThreshold: 0 },
  { key: 'nostag_nt1_k1', noiseThreshold: 1, k: 1, deltaThreshold: 0 },
];

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
    judge_calls_per_plan: variant.k,
    judging: variant.k === 1 ? 'single judge' : `median of ${variant.k}`,
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
 * 4. Judge noise: the seeds' refinement rules driven by a simulated judge whose score is the
 * true quality plus gaussian noise; wrong decisions against the true quality and the calls
 * spent. Pure computation, no Redis.
 */
async function run(ctx: BenchContext): Promise<void> {
  const sessions = ctx.quick ? 5_000 : 50_000;
  const refinement = parseConfig({}).refinement;
  for (const sigma of SIGMAS) {
    const model: NoiseModel = { sigma, firstQuality: [40, 100], replanGain: [0, 15] };
    for (const variant of VARIANTS) {
      const outcome = simulateJudgeNoise({
        model,
        variant,
        refinement,
        sessions,
        truthSeed: 1000 + sigma,
        noiseSeed: 2000 + sigma,
      });
      const ctxFields = context(outcome, variant, model);
      const wrong =
        outcome.byDecision.accept.wrong +
        outcome.byDecision.replan.wrong +
        outcome.byDecision.reject.wrong;
      const base = `judge_noise.sigma_${sigma}.${variant.key}`;
      ctx.reporter.record({
        name: `${base}.wrong_decision_rate`,
        value: rate(wrong, outcome.decisions),
        unit: 'ratio',
        ...ctxFields,
      });
      ctx.reporter.record({
        name: `${base}.llm_calls_per_session`,
        value: outcome.llmCalls / outcome.sessions,
        unit: 'calls',
        ...ctxFields,
      });
    }
    log(`judge noise sigma ${sigma}: ${VARIANTS.length} variants × ${sessions} sessions`);
  }
  // No Redis, no processes: yield once so the JSON lines flush in order with the others.
  await Promise.resolve();
}

export const judgeNoise: BenchScenario = {
  name: 'noise',
  description: 'wrong accept/replan/reject rates and LLM calls under a noisy judge (no Redis)',
  run,
};
