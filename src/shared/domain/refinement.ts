import { z } from 'zod';

export const RefinementDecision = z.enum(['accept', 'replan', 'reject']);
export type RefinementDecision = z.infer<typeof RefinementDecision>;

/** Seed 003: the direction of a score change once noise is discounted. */
export const ScoreDirection = z.enum(['improved', 'degraded', 'stable', 'unknown']);
export type ScoreDirection = z.infer<typeof ScoreDirection>;

/** Why makeRefinementDecision decided what it did; one code per priority of seed 000/003. */
export const RefinementReasonCode = z.enum([
  'max_attempts_reached',
  'score_unavailable',
  'stagnation',
  'stagnation_noise',
  'quality_below_threshold',
  'apply_suggestions',
  /** refinement.targetScore: an acceptable plan at or above it is accepted at once. */
  'target_score_reached',
  /** refinement.targetScore: an acceptable plan below it is replanned for its suggestions. */
  'target_score_not_reached',
  'quality_ok',
  /** A replan broke the plan's structure: the previous plan is used (decideBrokenReplan). */
  'structure_broken',
]);
export type RefinementReasonCode = z.infer<typeof RefinementReasonCode>;

export const Feedback = z.object({
  issues: z.array(z.string()),
  suggestions: z.array(z.string()),
});
export type Feedback = z.infer<typeof Feedback>;

export const RefinementResult = z.object({
  decision: RefinementDecision,
  reasonCode: RefinementReasonCode,
  reason: z.string(),
  feedback: Feedback.optional(),
  previousScore: z.number().optional(),
  currentScore: z.number().optional(),
  attemptCount: z.number().int(),
  suggestionReplanCount: z.number().int(),
  scoreDirection: ScoreDirection.optional(),
});
export type RefinementResult = z.infer<typeof RefinementResult>;

/** Seed 002: terms from the user's instruction that must survive replans. */
export const RequiredTerms = z.object({
  terms: z.array(z.string()),
  source: z.enum(['user-input', 'original-tasks']),
});
export type RequiredTerms = z.infer<typeof RequiredTerms>;

export const TermPreservationResult = z.object({
  preserved: z.array(z.string()),
  missing: z.array(z.string()),
  preservationRate: z.number().min(0).max(1),
});
export type TermPreservationResult = z.infer<typeof TermPreservationResult>;

/** Seed 000 + 002: what validateStructure found when comparing a replan with its predecessor. */
export const StructureValidation = z.object({
  isValid: z.boolean(),
  /** Relative change of the task count (|new - old| / old). */
  taskCountChange: z.number(),
  hasCircularDependency: z.boolean(),
  hasDanglingDependency: z.boolean(),
  /** Each cycle found, as the task ids along it. */
  cycles: z.array(z.array(z.string())).default([]),
  /** Each dependency naming a task that does not exist. */
  danglingDependencies: z
    .array(z.object({ taskId: z.string(), dependsOn: z.string() }))
    .default([]),
  termPreservation: TermPreservationResult.optional(),
  hasTermLoss: z.boolean(),
  /** Human-readable reasons the structure is broken (empty when valid). */
  problems: z.array(z.string()).default([]),
});
export type StructureValidation = z.infer<typeof StructureValidation>;
