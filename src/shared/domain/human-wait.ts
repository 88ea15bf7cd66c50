import { z } from 'zod';
import { PlanBreakdown } from './plan.js';
import { TaskId } from './task.js';

/**
 * A session waiting for a person (issue 48). The wait is a record on the session, written by
 * the coordinator in the same atomic write that moves the session into its waiting state, and
 * its opening and closing are history entries. Nothing runs while it is open: no job, worker
 * slot, lock or quota place is held, so it survives any pod's death and a Redis restart with
 * AOF like the rest of the session. Its id fences answers: an answer names the wait it answers,
 * and one for a wait that is no longer open changes nothing (WaitEndedError).
 */

export const WaitId = z
  .string()
  .min(1)
  .max(300)
  .regex(/^[A-Za-z0-9_.-]+$/, 'wait ids use letters, digits and _ . - only');
export type WaitId = z.infer<typeof WaitId>;

/**
 * What happens to a wait nobody answered in time: a plan approval's after approval.timeoutSeconds
 * (approval.onTimeout), a step approval's after approval.stepTimeoutSeconds (onStepTimeout).
 */
export const ApprovalTimeoutAction = z.enum(['approve', 'reject']);
export type ApprovalTimeoutAction = z.infer<typeof ApprovalTimeoutAction>;

const waitBase = {
  id: WaitId,
  openedAt: z.string(),
  /**
   * With approval.timeoutSeconds (a plan's) or approval.stepTimeoutSeconds (a running
   * execution's): the time the wait ends on its own, and how (none for an agent's question,
   * whose agent goes on without an answer).
   */
  timeoutAt: z.string().optional(),
  onTimeout: ApprovalTimeoutAction.optional(),
};

/** The refinement loop accepted a plan; a person approves, edits or rejects it before it runs. */
export const PlanApprovalWait = z.object({
  ...waitBase,
  kind: z.literal('plan-approval'),
  /** The planning attempt whose plan waits. */
  attempt: z.number().int().min(0),
  plan: PlanBreakdown,
  score: z.number().optional(),
  issues: z.array(z.string()).default([]),
  suggestions: z.array(z.string()).default([]),
  /** Why the refinement loop accepted it. */
  reason: z.string(),
});
export type PlanApprovalWait = z.infer<typeof PlanApprovalWait>;

/**
 * The Judge blocked a task for information only a person has: the task stays BLOCKED with the
 * question, and a person's answer runs it again with the answer as its feedback (a resume
 * --note with the question kept beside it). One per blocked execution of a task, kept on the
 * session (session.questions) while it is open, as several tasks may ask at once.
 */
export const QuestionWait = z.object({
  ...waitBase,
  kind: z.literal('question'),
  taskId: TaskId,
  /** The execution whose verdict asked: an answer applies only while the task is still there. */
  attempt: z.number().int().min(1),
  question: z.string().min(1),
  /** Why the Judge blocked the task, or that the agent asked. */
  reason: z.string(),
  /**
   * An agent's ask_human (step-waits.ts): the step of the running execution that asks. The task
   * stays RUNNING, and the answer resumes that execution with it as the tool's result.
   */
  step: z.number().int().min(0).optional(),
});
export type QuestionWait = z.infer<typeof QuestionWait>;

/**
 * approval.steps: a step of a running execution (an agent's tool call, a command run) waits for
 * a person before it runs. The task stays RUNNING with its work job ended: approved, the same
 * execution resumes from its recorded steps and runs the step; rejected, the executor hears why.
 */
export const StepApprovalWait = z.object({
  ...waitBase,
  kind: z.literal('step-approval'),
  taskId: TaskId,
  /** The execution that waits. */
  attempt: z.number().int().min(1),
  /** Its step (the index of its recorded step that asks). */
  step: z.number().int().min(0),
  /** The agent's tool, or `command` for the command executor's run. */
  tool: z.string().min(1),
  /** The exact input the step runs with, as the person approves it. */
  input: z.unknown(),
  /** The command line, when the step starts a program. */
  command: z.string().optional(),
  /** The approval.steps rule that matched, as text. */
  rule: z.string(),
});
export type StepApprovalWait = z.infer<typeof StepApprovalWait>;

export const HumanWait = z.discriminatedUnion('kind', [
  PlanApprovalWait,
  QuestionWait,
  StepApprovalWait,
]);
export type HumanWait = z.infer<typeof HumanWait>;
/** The kinds of wait: a plan approval, a question, a step approval. */
export const HumanWaitKind = z.enum(['plan-approval', 'question', 'step-approval']);
export type HumanWaitKind = z.infer<typeof HumanWaitKind>;

/** A person's answer to a plan approval. */
export const PlanAnswer = z.discriminatedUnion('action', [
  z.strictObject({
    action: z.literal('approve'),
    comment: z.string().min(1).max(20_000).optional(),
  }),
  z.strictObject({
    action: z.literal('reject'),
    /** Sent to the Planner as the feedback of a replan. */
    feedback: z.string().trim().min(1, 'a rejection says what to change').max(20_000),
  }),
  z.strictObject({
    action: z.literal('edit'),
    /** The plan to run instead; checked as a replan is (structure, required terms). */
    plan: PlanBreakdown,
    /** Run it even though it drops required terms of the instruction. */
    allowTermLoss: z.boolean().optional(),
    comment: z.string().min(1).max(20_000).optional(),
  }),
]);
export type PlanAnswer = z.infer<typeof PlanAnswer>;
export type PlanAnswerInput = z.input<typeof PlanAnswer>;

/** A person's answer to a question: the task runs again with it in its context. */
export const QuestionAnswer = z.strictObject({
  action: z.literal('answer'),
  text: z.string().trim().min(1, 'an answer says something').max(20_000),
});
export type QuestionAnswer = z.infer<typeof QuestionAnswer>;

/**
 * What a running execution is told when its step wait ends: carried by the work job that resumes
 * it (ExecuteJob.resume), for the step it names.
 */
export const StepDecision = z.object({
  waitId: WaitId,
  step: z.number().int().min(0),
  action: z.enum(['approve', 'reject', 'answer']),
  /** A rejection's reason, or the answer to an ask_human. */
  text: z.string().optional(),
  by: z.string().optional(),
  /**
   * Nobody answered within approval.stepTimeoutSeconds: the decision is onStepTimeout's (an
   * ask_human gets no answer), and `text` says so.
   */
  timedOut: z.literal(true).optional(),
});
export type StepDecision = z.infer<typeof StepDecision>;

/** A person's answer to any wait: the plan answers, or a question's. */
export const WaitAnswer = z.discriminatedUnion('action', [...PlanAnswer.options, QuestionAnswer]);
export type WaitAnswer = z.infer<typeof WaitAnswer>;
export type WaitAnswerInput = z.input<typeof WaitAnswer>;
export type AnswerAction = WaitAnswer['action'];

/** Who answered, as the producer that took the answer knows it. */
export const Answerer = z.string().min(1).max(200);
