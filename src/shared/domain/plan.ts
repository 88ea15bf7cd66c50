import { z } from 'zod';
import { TaskId } from './task.js';

/** One task as the Planner (or Replanner) proposes it, before orq tracks its state. */
export const PlannedTask = z.object({
  id: TaskId,
  title: z.string().min(1),
  acceptance: z.string().min(1),
  context: z.string().default(''),
  scopePaths: z.array(z.string()).default([]),
  dependencies: z.array(TaskId).default([]),
  executor: z.string().optional(),
});
export type PlannedTask = z.infer<typeof PlannedTask>;

/** The Planner's output: a task breakdown of the instruction. */
export const PlanBreakdown = z.object({
  summary: z.string().default(''),
  tasks: z.array(PlannedTask).min(1),
});
export type PlanBreakdown = z.infer<typeof PlanBreakdown>;

/** The Replanner's output: subtasks that replace one task (dependencies only among themselves). */
export const ReplanBreakdown = z.object({
  reason: z.string().default(''),
  tasks: z.array(PlannedTask).min(1),
});
export type ReplanBreakdown = z.infer<typeof ReplanBreakdown>;

/**
 * What the plan judge (a model) answers: only what it decides, with the fields orq needs to
 * decide required, so a missing score is a repair turn, not "score unavailable". Its JSON Schema
 * is what the model is shown; orq's own fields are added by QualityJudgement.
 */
export const QualityJudgementAnswer = z.object({
  score: z.number().min(0).max(100),
  isAcceptable: z.boolean(),
  issues: z.array(z.string()).default([]),
  suggestions: z.array(z.string()).default([]),
});
export type QualityJudgementAnswer = z.infer<typeof QualityJudgementAnswer>;

/**
 * A plan judgement as orq keeps it (seed 000): the answer, a score that may be missing (the
 * scenario fake's "score unavailable", records stored before the answer required one), and what
 * orq computes from several samples.
 */
export const QualityJudgement = QualityJudgementAnswer.extend({
  score: QualityJudgementAnswer.shape.score.optional(),
  /** With llm.judgeSamples k > 1 or adaptive: every sample's score, in call order. */
  samples: z.array(z.number().min(0).max(100)).optional(),
  /** Highest minus lowest sample score. */
  spread: z.number().min(0).optional(),
  /**
   * With llm.judgeSamples.logprobScores: score is the expected value over the score token's
   * log-probabilities; `stated` is the score the model wrote, `mass` the probability weighed.
   */
  scoreWeighting: z.object({ stated: z.number(), mass: z.number().min(0).max(1) }).optional(),
  /**
   * With llm.judgeSamples.mode "adaptive": why each call after the first was made (the line it
   * could change the decision at), and why the judging stopped. score is the rounded mean.
   */
  adaptive: z
    .object({
      extraCalls: z.array(z.object({ call: z.number().int().min(2), reason: z.string() })),
      stopped: z.string(),
      /**
       * σ believed before this plan's scores (priorSigma, or learned with learnNoise) and the
       * repeated calls on earlier plans of the same judge it was learned from.
       */
      prior: z.object({ sigma: z.number().min(0), learnedFrom: z.number().min(0) }).optional(),
    })
    .optional(),
});
export type QualityJudgement = z.infer<typeof QualityJudgement>;
