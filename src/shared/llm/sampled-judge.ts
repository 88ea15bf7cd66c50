import type { QualityJudgement } from '../domain/plan.js';
import type { TokenUsage } from '../domain/task.js';
import { OrqError } from '../errors.js';
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
 * One judgement from k samples: the median score, isAcceptable by majority vote (a tie goes
 * to the sample closest to the median), the issues and suggestions of that closest sample, and
 * every score with their spread. Samples without a score ("score unavailable") still vote; the
 * score is unavailable only when no sample has one.
 */
export function aggregateJudgements(samples: readonly QualityJudgement[]): QualityJudgement {
  const first = samples[0];
  if (!first) throw new RangeError('no judge samples to aggregate');
  const scores = samples.flatMap((s) => (s.score === undefined ? [] : [s.score]));
  const score = scores.length > 0 ? median(scores) : undefined;

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
  return {
    label: models.label,
    plan: (request) => models.plan(request),
    execute: (request) => models.execute(request),
    judgeTask: (request) => models.judgeTask(request),
    replan: (request) => models.replan(request),
    async judgePlan(request): Promise<ModelReply<QualityJudgement>> {
      // Wait for every sample, so none is left running (and spending) when one fails.
      const settled = await Promise.allSettled(
        Array.from({ length: k }, (_, sample) => models.judgePlan({ ...request, sample })),
      );
      const failures = settled.flatMap((s) => (s.status === 'rejected' ? [s.reason] : []));
      if (failures.length > 0) {
        // A budget refusal wins: it stops the session, where another error would be retried.
        throw (
          failures.find((e) => e instanceof OrqError && e.code === 'BUDGET_EXHAUSTED') ??
          failures[0]
        );
      }
      const replies = settled.flatMap((s) => (s.status === 'fulfilled' ? [s.value] : []));
      return {
        value: aggregateJudgements(replies.map((r) => r.value)),
        usage: sumUsage(replies.map((r) => r.usage)),
      };
    },
  };
}
