import { z } from 'zod';
import { PlanBreakdown, QualityJudgement } from './plan.js';
import { TaskJudgement, TaskResult } from './task.js';
import { Answerer, HumanWait, HumanWaitKind, WaitAnswer, WaitId } from './human-wait.js';

const base = {
  timestamp: z.string(),
  sessionId: z.string(),
  taskId: z.string().optional(),
};

/**
 * One line of a session's history. The `type` values plan, revision and reflection keep
 * seed 004's JSONL line format; the others record orq's own judgements and decisions.
 */
export const HistoryEntry = z.discriminatedUnion('type', [
  z.object({
    ...base,
    type: z.literal('plan'),
    /** planner: a session plan; replanner: subtasks replacing a task; agent: an in-task plan; person: an edited plan. */
    source: z.enum(['planner', 'replanner', 'agent', 'person']),
    attempt: z.number().int().min(0),
    plan: z.union([PlanBreakdown, z.record(z.string(), z.unknown())]),
  }),
  z.object({
    ...base,
    type: z.literal('judgement'),
    subject: z.enum(['plan', 'task']),
    attempt: z.number().int().min(0),
    judgement: z.union([QualityJudgement, TaskJudgement]),
  }),
  z.object({
    ...base,
    type: z.literal('decision'),
    /** e.g. refinement:accept, task:continue, structure:invalid */
    decision: z.string(),
    reason: z.string(),
    /** The inputs the rule saw: scores, attempts, missing terms... */
    inputs: z.record(z.string(), z.unknown()).default({}),
  }),
  z.object({
    ...base,
    type: z.literal('revision'),
    reason: z.string(),
    changes: z.array(z.unknown()).default([]),
  }),
  z.object({
    ...base,
    type: z.literal('reflection'),
    evaluation: z.record(z.string(), z.unknown()),
  }),
  z.object({
    ...base,
    type: z.literal('state_change'),
    entity: z.enum(['session', 'task']),
    from: z.string().optional(),
    to: z.string(),
    reason: z.string().optional(),
  }),
  z.object({
    ...base,
    type: z.literal('execution'),
    attempt: z.number().int().min(0),
    result: TaskResult,
    /** The fence of the delivery whose result this is, when a later delivery ran it (past 1). */
    fence: z.number().int().min(2).optional(),
  }),
  z.object({
    ...base,
    type: z.literal('action'),
    tool: z.string(),
    input: z.unknown(),
    output: z.unknown().optional(),
    error: z.string().optional(),
    /**
     * The call waits for a person and has not run (issue 48): a step approval (the rule that
     * matched in `rule`) or an agent's question. Its outcome is the next step's action.
     */
    awaiting: z.enum(['step-approval', 'question']).optional(),
    rule: z.string().optional(),
  }),
  z.object({
    ...base,
    type: z.literal('wait'),
    /** opened: the session waits for a person; answered, timed-out or cancelled: it stopped waiting. */
    action: z.enum(['opened', 'answered', 'timed-out', 'cancelled']),
    waitId: WaitId,
    kind: HumanWaitKind,
    /** On opened: what the person is shown. */
    wait: HumanWait.optional(),
    /** On answered (and timed-out, as the action the config named). */
    answer: WaitAnswer.optional(),
    by: Answerer.optional(),
  }),
  z.object({
    ...base,
    type: z.literal('error'),
    role: z.string(),
    message: z.string(),
    code: z.string().optional(),
    attempt: z.number().int().min(0).optional(),
  }),
]);
export type HistoryEntry = z.infer<typeof HistoryEntry>;
export type HistoryEntryType = HistoryEntry['type'];

type DistributiveOmit<T, K extends PropertyKey> = T extends unknown ? Omit<T, K> : never;
/** A history entry before it is stamped with its time and session. */
export type HistoryEntryDraft = DistributiveOmit<HistoryEntry, 'timestamp' | 'sessionId'>;
