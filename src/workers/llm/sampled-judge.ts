import type { JudgeSamplesConfig, RefinementConfig } from '../../shared/config/schema.js';
import type { QualityJudgement } from '../../shared/domain/plan.js';
import {
  mean,
  nextJudgeStep,
  noisePrior,
  spreadOf,
  type AdaptiveJudgingSettings,
  type NoisePool,
} from '../../shared/rules/adaptive-judging.js';
import { confirmVerdict, verdictOf, type CostlyVerdict } from '../../shared/rules/task-verdict.js';
import type { TaskJudgement, TokenUsage } from '../../shared/domain/task.js';
import { MustWaitError, OrqError } from '../../shared/errors.js';
import type { ModelReply, RoleModels } from './types.js';

/**
 * Judge noise (issue 4): the plan judge is asked k times and the median score decides, so one
 * outlying score cannot accept or reject a plan. Seed 003's noiseThreshold still applies on
 * top, to the median, when the coordinator compares it with the previous attempt's score.
 */

/** The median of a non-empty list (the mean of the two middle values for an even length). */
export function median(values: readonly number[]): number {
  if (values.length === 0) throw new RangeError('median of an empty list');
  const sorted = [...values].sort((a, b) => a - b);
  const middle = Math.floor(sorted.length / 2);
  const upper = sorted[middle] as number;
  return sorted.length % 2 === 1 ? upper : ((sorted[middle - 1] as number) + upper) / 2;
}

/**
 * One judgement from k samples: the median score (or the rounded mean, for adaptive judging), isAcceptable by majority vote (a tie goes
 * to the sample closest to the median), the issues and suggestions of that closest sample, and
 * every score with their spread. Samples without a score ("score unavailable") still vote; the
 * score is unavailable only when no sample has one.
 */
export function aggregateJudgements(
  samples: readonly QualityJudgement[],
  aggregate: 'median' | 'rounded-mean' = 'median',
): QualityJudgement {
  const first = samples[0];
  if (!first) throw new RangeError('no judge samples to aggregate');
  const scores = samples.flatMap((s) => (s.score === undefined ? [] : [s.score]));
  const center = aggregate === 'median' ? median : (values: number[]) => Math.round(mean(values));
  const score = scores.length > 0 ? center(scores) : undefined;

  // The sample closest to the median speaks for the group; the earliest wins a tie.
  let representative = first;
  if (score !== undefined) {
    let best = Infinity;
    for (const sample of samples) {
      if (sample.score === undefined) continue;
      const distance = Math.abs(sample.score - score);
      if (distance < best) {
        best = distance;
        representative = sample;
      }
    }
  }

  const votes = samples.filter((s) => s.isAcceptable).length;
  const isAcceptable =
    votes * 2 === samples.length ? representative.isAcceptable : votes * 2 > samples.length;

  return {
    ...(score !== undefined ? { score } : {}),
    isAcceptable,
    issues: representative.issues,
    suggestions: representative.suggestions,
    samples: scores,
    spread: scores.length > 0 ? Math.max(...scores) - Math.min(...scores) : 0,
  };
}

function sumUsage(usages: readonly TokenUsage[]): TokenUsage {
  return usages.reduce(
    (sum, u) => ({
      inputTokens: sum.inputTokens + u.inputTokens,
      outputTokens: sum.outputTokens + u.outputTokens,
    }),
    { inputTokens: 0, outputTokens: 0 },
  );
}

/**
 * Wraps `models` so judgePlan asks k samples in parallel (request.sample = 0..k-1) and returns
 * their aggregate; the other calls pass through. k <= 1 returns the models unchanged. Put it
 * outside meteredModels so each sample reserves and counts as a call of its own.
 */
export function sampledJudge(models: RoleModels, k: number): RoleModels {
  if (k <= 1) return models;
  return overriding(models, {
    async judgePlan(request): Promise<ModelReply<QualityJudgement>> {
      // Wait for every sample, so none is left running (and spending) when one fails.
      const settled = await Promise.allSettled(
        Array.from({ length: k }, (_, sample) => models.judgePlan({ ...request, sample })),
      );
      const failures = settled.flatMap((s) => (s.status === 'rejected' ? [s.reason] : []));
      if (failures.length > 0) {
        // A budget refusal wins: it stops the session, where another error would be retried;
        // then a wait (for budget room or quota), which hands the job back without a failure.
        throw firstFailure(failures);
      }
      const replies = settled.flatMap((s) => (s.status === 'fulfilled' ? [s.value] : []));
      return {
        value: aggregateJudgements(replies.map((r) => r.value)),
        usage: sumUsage(replies.map((r) => r.usage)),
      };
    },
  });
}

/** `models` with `calls` in place of its own; every other call passes through. */
function overriding(
  models: RoleModels,
  calls: Partial<Pick<RoleModels, 'judgePlan' | 'judgeTask'>>,
): RoleModels {
  return {
    label: models.label,
    plan: (request) => models.plan(request),
    judgePlan: (request) => models.judgePlan(request),
    execute: (request) => models.execute(request),
    judgeTask: (request) => models.judgeTask(request),
    replan: (request) => models.replan(request),
    ...calls,
  };
}

/** The first failure to throw of several calls (see sampledJudge). */
function firstFailure(failures: readonly unknown[]): unknown {
  return (
    failures.find((e) => e instanceof OrqError && e.code === 'BUDGET_EXHAUSTED') ??
    failures.find((e) => e instanceof MustWaitError) ??
    failures[0]
  );
}

/** Where a judge's learned noise is kept (store/judge-noise-store.ts), and which judge this is. */
export interface JudgeNoiseMemory {
  read(judge: string): Promise<NoisePool | undefined>;
  add(judge: string, spread: NoisePool): Promise<void>;
}

export interface LearnedNoise {
  memory: JudgeNoiseMemory;
  /** The judge whose noise is pooled: its provider and model. */
  judge: string;
}

/**
 * Adaptive judging (issue 38): judgePlan asks once, then again one call at a time
 * (request.sample = 1, 2, ...) while nextJudgeStep finds a line within the margin where the
 * refinement decision would change, up to settings.maxCalls. The rounded mean decides; every
 * extra call's reason and the reason to stop go into the judgement (and so the history).
 * Without request.refinementState the plan is taken as a first plan with no attempts used.
 * With `learned` (and settings.learnNoise) σ's prior comes from the judge's earlier plans, and
 * this plan's spread is added to them.
 */
export function adaptiveJudge(
  models: RoleModels,
  settings: AdaptiveJudgingSettings,
  refinement: RefinementConfig,
  learned?: LearnedNoise,
): RoleModels {
  const learning = settings.learnNoise ? learned : undefined;
  return overriding(models, {
    async judgePlan(request): Promise<ModelReply<QualityJudgement>> {
      const state = request.refinementState ?? { attemptCount: 0, suggestionReplanCount: 0 };
      const context = { ...state, refinement };
      const prior = noisePrior(
        learning ? await learning.memory.read(learning.judge) : undefined,
        settings,
      );
      const replies: ModelReply<QualityJudgement>[] = [];
      const extraCalls: { call: number; reason: string }[] = [];
      let stopped: string;
      for (;;) {
        // One at a time: whether to ask again depends on the scores so far.
        replies.push(await models.judgePlan({ ...request, sample: replies.length }));
        const scores = replies.flatMap((r) => (r.value.score === undefined ? [] : [r.value.score]));
        if (scores.length === 0) {
          stopped = 'the judge returned no score: nothing to test';
          break;
        }
        const step = nextJudgeStep(scores, context, settings, prior);
        if (!step.again) {
          stopped = step.reason;
          break;
        }
        extraCalls.push({ call: replies.length + 1, reason: step.reason });
      }
      const value = aggregateJudgements(
        replies.map((r) => r.value),
        'rounded-mean',
      );
      if (learning && value.samples) {
        // The calls are spent either way: a lost write only slows the learning, so it must
        // not fail the judgement (and have the job ask the judge all over again).
        await learning.memory.add(learning.judge, spreadOf(value.samples)).catch(() => undefined);
      }
      return {
        value: {
          ...value,
          adaptive: {
            extraCalls,
            stopped,
            prior: { sigma: Number(prior.sigma.toFixed(2)), learnedFrom: prior.learnedFrom },
          },
        },
        usage: sumUsage(replies.map((r) => r.usage)),
      };
    },
  });
}

/**
 * Issue 38: judgeTask's costly verdicts (`confirm`) get a second opinion, and a third when the
 * two disagree (rules/task-verdict.ts). The judgement kept carries every verdict and the reason.
 * Calls go one at a time, each its own request (request.sample = 0, 1, 2) and metered call.
 */
export function confirmedTaskJudge(
  models: RoleModels,
  confirm: readonly CostlyVerdict[],
): RoleModels {
  if (confirm.length === 0) return models;
  return overriding(models, {
    async judgeTask(request): Promise<ModelReply<TaskJudgement>> {
      const replies: ModelReply<TaskJudgement>[] = [];
      for (;;) {
        replies.push(await models.judgeTask({ ...request, sample: replies.length }));
        const verdicts = replies.map((r) => verdictOf(r.value));
        const step = confirmVerdict(verdicts, confirm);
        if (!step.settled) continue;
        const kept = replies[step.index] as ModelReply<TaskJudgement>;
        return {
          value:
            replies.length === 1
              ? kept.value
              : { ...kept.value, confirmation: { verdicts, reason: step.reason } },
          usage: sumUsage(replies.map((r) => r.usage)),
        };
      }
    },
  });
}

/**
 * The judge as llm.judgeSamples configures it: the plan judge with fixed k samples or adaptive,
 * the task judge with its costly verdicts confirmed.
 */
export function judgeSampling(
  models: RoleModels,
  config: JudgeSamplesConfig,
  refinement: RefinementConfig,
  learned?: LearnedNoise,
): RoleModels {
  const tasks = confirmedTaskJudge(models, config.confirmTaskVerdicts);
  return config.mode === 'adaptive'
    ? adaptiveJudge(tasks, config.adaptive, refinement, learned)
    : sampledJudge(tasks, config.k);
}
