import { z } from 'zod';
import { PlanBreakdown } from './plan.js';
import { RefinementResult, RequiredTerms } from './refinement.js';
import { TaskId } from './task.js';
import { SessionConfig } from '../config/schema.js';
import { SessionIntegration } from './integration.js';
import { PlanApprovalWait, QuestionWait, StepApprovalWait, type HumanWait } from './human-wait.js';

export const SessionState = z.enum([
  /** Planner/Judge refinement loop in progress. */
  'PLANNING',
  /** Plan accepted; tasks are being executed. */
  'RUNNING',
  /** Every task is finished; their git branches are being merged into one result branch. */
  'INTEGRATING',
  /** The plan was accepted and waits for a person to approve, edit or reject it (issue 48). */
  'AWAITING_APPROVAL',
  /** Nothing can run and at least one task is BLOCKED: waits for `resume`. */
  'BLOCKED',
  'COMPLETED',
  /** The plan was rejected or an unrecoverable error occurred. */
  'FAILED',
  'CANCELLED',
  /** A model call would have crossed the session's token or USD budget: stopped, not failed. */
  'BUDGET_EXHAUSTED',
]);
export type SessionState = z.infer<typeof SessionState>;

export const FINISHED_SESSION_STATES: readonly SessionState[] = [
  'COMPLETED',
  'FAILED',
  'CANCELLED',
  'BUDGET_EXHAUSTED',
];

/** States a resume applies to: blocked tasks (BLOCKED, or RUNNING with some), or a raised budget. */
export const RESUMABLE_SESSION_STATES: readonly SessionState[] = [
  'BLOCKED',
  'RUNNING',
  'BUDGET_EXHAUSTED',
];

/**
 * States a person's request moves a session on from: a resume's, or an answer to the wait of a
 * session AWAITING_APPROVAL. A watch waits through them while such a request is queued.
 */
export const REQUEST_SETTLED_STATES: readonly SessionState[] = [
  ...RESUMABLE_SESSION_STATES,
  'AWAITING_APPROVAL',
];

/**
 * Who a session is for: fairness shares the workers equally among tenants first, then among a
 * tenant's sessions (docs/fairness.md).
 */
export const TenantId = z
  .string()
  .min(1, { error: 'a tenant must not be empty', abort: true })
  .max(64, 'a tenant has at most 64 characters')
  .regex(/^[A-Za-z0-9_.-]+$/, 'tenants use letters, digits and _ . - only');
export type TenantId = z.infer<typeof TenantId>;

/** A session's priority: 1 to 9, higher served first; 5 when not given. */
export const SessionPriority = z.number().int().min(1).max(9);
const DEFAULT_TENANT = 'default';
const DEFAULT_PRIORITY = 5;

export const SessionId = z
  .string()
  // An empty id is one problem: not also a bad character (abort stops the checks after it).
  .min(1, { error: 'a session id must not be empty', abort: true })
  .max(128, 'a session id has at most 128 characters')
  .regex(/^[A-Za-z0-9_-]+$/, 'session ids use letters, digits, _ and - only');
export type SessionId = z.infer<typeof SessionId>;

/** The message announcing that a session reached a finished state (sessionEndedChannel). */
export const SessionEnded = z.object({
  sessionId: SessionId,
  state: SessionState,
});
export type SessionEnded = z.infer<typeof SessionEnded>;

/** The plan refinement loop's counters (seed 000/003). */
export const PlanningProgress = z.object({
  /** Index of the plan attempt being worked on: 0 is the first plan, 1 the first replan... */
  attempt: z.number().int().min(0).default(0),
  /** Replans made because the plan was not good enough (seed 000's attemptCount). */
  attemptCount: z.number().int().min(0).default(0),
  /** Replans made only to apply an acceptable plan's suggestions. */
  suggestionReplanCount: z.number().int().min(0).default(0),
  /** Score of the previous judged plan, for stagnation and noise checks. */
  previousScore: z.number().optional(),
  /** The last judged plan, kept for structure validation of the next one and for fallback. */
  previousPlan: PlanBreakdown.optional(),
  previousAcceptable: z.boolean().optional(),
  refinementHistory: z.array(RefinementResult).default([]),
});
export type PlanningProgress = z.infer<typeof PlanningProgress>;

export const Session = z.object({
  id: SessionId,
  instruction: z.string().min(1),
  state: SessionState,
  createdAt: z.string(),
  updatedAt: z.string(),
  requiredTerms: RequiredTerms,
  /** The effective configuration for this session, fixed at submit so every pod agrees. */
  config: SessionConfig,
  planning: PlanningProgress,
  /** Every task id the session ever had, in creation order (replaced ones included). */
  taskIds: z.array(TaskId).default([]),
  failure: z.object({ code: z.string(), reason: z.string() }).optional(),
  /** The integration of the tasks' branches (sessions whose tasks made git commits). */
  integration: SessionIntegration.optional(),
  /** What the session waits for a person about, while it waits (human-wait.ts). */
  wait: PlanApprovalWait.optional(),
  /** The questions its blocked tasks ask a person, while they are open (human-wait.ts). */
  questions: z.array(QuestionWait).optional(),
  /** The steps of running tasks that wait for a person's approval (approval.steps). */
  stepWaits: z.array(StepApprovalWait).optional(),
  idempotencyKey: z.string().optional(),
  /** With an idempotency key: the digest of the submit's config and metadata (submit-digest.ts). */
  requestDigest: z.string().optional(),
  /** Free-form labels from the submitter. */
  metadata: z.record(z.string(), z.string()).default({}),
  /** Whose session this is, for fair dispatch among tenants (sessions stored before: default). */
  tenant: TenantId.default(DEFAULT_TENANT),
  /** Served before every session of a lower priority (fair-release.ts). */
  priority: SessionPriority.default(DEFAULT_PRIORITY),
  /**
   * The W3C traceparent of the span that submitted it (tracing off: none): a cancel or resume
   * requested later joins the session's trace under it.
   */
  traceparent: z.string().max(64).optional(),
});
export type Session = z.infer<typeof Session>;

/** Every wait for a person the session holds: its plan approval, its questions, its steps. */
export function openWaits(session: Session): HumanWait[] {
  return [
    ...(session.wait ? [session.wait] : []),
    ...(session.questions ?? []),
    ...(session.stepWaits ?? []),
  ];
}
