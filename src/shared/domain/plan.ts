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

/** QualityJudge output on a plan (seed 000). A missing score is allowed: "score unavailable". */
export const QualityJudgement = z.object({
  score: z.number().min(0).max(100).optional(),
  isAcceptable: z.boolean(),
  issues: z.array(z.string()).default([]),
  suggestions: z.array(z.string()).default([]),
  /** With llm.judgeSamples.k > 1: every sample's score, in call order (score is their median). */
  samples: z.array(z.number().min(0).max(100)).optional(),
  /** Highest minus lowest sample score. */
  spread: z.number().min(0).optional(),
});
export type QualityJudgement = z.infer<typeof QualityJudgement>;
