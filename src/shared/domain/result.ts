import { z } from 'zod';
import { ResultConfig } from '../config/schema.js';
import { FinalVerdict, IntegrationOutcome } from './integration.js';
import { SessionId, SessionState } from './session.js';
import { Artifact, TaskId, TaskState } from './task.js';

/** One task's output in a session's result. */
export const ResultOutput = z.object({
  taskId: TaskId,
  title: z.string(),
  output: z.string(),
  artifacts: z.array(Artifact),
  /**
   * Result tasks with no output of their own (skipped, cancelled, not run yet) that this done
   * task stands in for: it is the nearest done task before them. Absent for a result task's own
   * output.
   */
  standsInFor: z.array(TaskId).optional(),
});
export type ResultOutput = z.infer<typeof ResultOutput>;

/** A task that belongs to the result but has no output: skipped, cancelled or unfinished. */
export const ResultGap = z.object({
  taskId: TaskId,
  title: z.string(),
  state: TaskState,
  /** Why, when the task says: its blocked reason, or the judge's reason for its last run. */
  reason: z.string().optional(),
});
export type ResultGap = z.infer<typeof ResultGap>;

/** The roles that call a model, as BuiltinUse names them. */
const ModelRoleName = z.enum(['planner', 'judge', 'worker', 'replanner']);

/**
 * Whether the builtin provider, a rule set and not an LLM, played some of a session's roles
 * (builtinUse, from the session's config): what the session shows was then made by no model.
 */
export const BuiltinUse = z.object({
  ranByBuiltin: z
    .boolean()
    .describe(
      'The builtin provider (a rule set, not an LLM) played one or more of the model roles, a scenario-scripted run included: no model made what those roles did.',
    ),
  builtinRoles: z
    .array(ModelRoleName)
    .describe('The roles the builtin provider played; empty when a model played every role.'),
});
export type BuiltinUse = z.infer<typeof BuiltinUse>;

/**
 * What a session produced (`orq result`, client.result(), GET /sessions/:id/result), derived
 * from its tasks by deriveSessionResult. Also the partial result of a session that stopped
 * short, with notes that say why.
 */
export const SessionResult = z.object({
  sessionId: SessionId,
  /** The session's state when the result was read. */
  state: SessionState,
  /** Which tasks make up the result (the session's result.tasks setting). */
  selection: ResultConfig.shape.tasks.unwrap(),
  /** The session COMPLETED and every task of the result is DONE: nothing is missing. */
  complete: z.boolean(),
  /** The outputs, in plan order (replacement subtasks where their replanned task was). */
  outputs: z.array(ResultOutput),
  /** Tasks of the result with no output, in plan order. */
  missing: z.array(ResultGap),
  /** Plain sentences on what is partial and why: a person reads them before the text. */
  notes: z.array(z.string()),
  /**
   * The outputs as one text: the output alone when there is one, else a `## id: title` section
   * each. Cut at result.maxTextLength (`textTruncated`); `outputs` always hold all of it.
   */
  text: z.string(),
  textTruncated: z.boolean(),
  ...BuiltinUse.shape,
  /**
   * Where the tasks' git work was merged (sessions whose tasks ran through the command
   * executor): the result branch, its commit, the diff stat against the base and the checks
   * run on it; or the conflict that stopped the merge. Absent for other sessions.
   */
  integration: IntegrationOutcome.optional(),
  /** The final judge's last word on the result branch: done, or what is still missing. */
  finalJudgement: FinalVerdict.optional(),
});
export type SessionResult = z.infer<typeof SessionResult>;
