import type { PlanningConfig } from '../../../shared/config/schema.js';
import type { TaskStepRecord } from '../../../shared/store/session-records.js';
import {
  afterAction,
  afterReflection,
  afterRevision,
  INITIAL_COUNTERS,
  reflectionTrigger,
  type AgentCounters,
  type ReflectionTrigger,
} from './policy.js';
import { AgentPlan, AgentReflection, type AgentTurn, type PlanRevision } from './types.js';

/** Where an agent run stands: rebuilt from its recorded steps, so a crashed run can go on. */
export interface AgentRunState {
  plan?: AgentPlan;
  /** A plan was written (or planning was skipped in legacy mode, which writes none). */
  planned: boolean;
  transcript: AgentTurn[];
  counters: AgentCounters;
  /** Index of the next step to record. */
  nextStep: number;
  /** A reflection is due (the last action failed or ended an interval) and not yet written. */
  pendingReflection?: ReflectionTrigger;
  /** A reflection decided to revise, and the revision is not yet written. */
  pendingRevision?: PlanRevision;
  /**
   * The last step is a tool call waiting for a person (issue 48): approved, rejected or
   * answered, its outcome is the next step. Nothing else happens before that.
   */
  awaiting?: AwaitingStep;
}

/** A recorded tool call that waits for a person (an action step with `awaiting`). */
export interface AwaitingStep {
  step: number;
  kind: 'step-approval' | 'question';
  tool: string;
  input: unknown;
  rule?: string;
}

export const FRESH_RUN: AgentRunState = {
  planned: false,
  transcript: [],
  counters: INITIAL_COUNTERS,
  nextStep: 0,
};

/** What a reflection step records besides the model's reply. */
export interface ReflectionRecord extends AgentReflection {
  trigger: ReflectionTrigger;
  /** The reply asked for a revision and one was still allowed: a revision step follows. */
  revision_applied: boolean;
}

/**
 * Replays the recorded steps of one execution attempt (pure). The latest plan or revision
 * gives the plan; actions, reflections and revisions give the counters and the transcript; a
 * run that stopped between an action and its reflection, or between a reflection and its
 * revision, gets that step done first when it resumes.
 */
export function restoreRun(
  records: readonly TaskStepRecord[],
  planning: PlanningConfig,
): AgentRunState {
  let state: AgentRunState = { ...FRESH_RUN, transcript: [] };
  let lastActionFailed = false;
  for (const { step, entry, plan } of records) {
    state.nextStep = step + 1;
    state.pendingRevision = undefined;
    state.awaiting = undefined;
    if (entry.type === 'action' && entry.awaiting) {
      state.awaiting = {
        step,
        kind: entry.awaiting,
        tool: entry.tool,
        input: entry.input,
        ...(entry.rule !== undefined ? { rule: entry.rule } : {}),
      };
      continue;
    }
    switch (entry.type) {
      case 'plan': {
        state.planned = true;
        const parsed = AgentPlan.safeParse(plan ?? entry.plan);
        if (parsed.success) state.plan = parsed.data;
        break;
      }
      case 'action': {
        lastActionFailed = entry.error !== undefined;
        state.counters = afterAction(state.counters);
        state.transcript.push({
          kind: 'action',
          step,
          tool: entry.tool,
          input: entry.input,
          ...(typeof entry.output === 'string' ? { output: entry.output } : {}),
          ...(entry.error !== undefined ? { error: entry.error } : {}),
        });
        break;
      }
      case 'reflection': {
        state.counters = afterReflection(state.counters);
        const reflection = AgentReflection.safeParse(entry.evaluation);
        const value: AgentReflection = reflection.success
          ? reflection.data
          : {
              status: 'partial',
              evaluation: JSON.stringify(entry.evaluation),
              plan_revision_needed: false,
            };
        state.transcript.push({
          kind: 'reflection',
          step,
          reflection: value,
          ...(typeof entry.evaluation.trigger === 'string'
            ? { trigger: entry.evaluation.trigger }
            : {}),
        });
        if (entry.evaluation.revision_applied === true) {
          state.pendingRevision = value.plan_revision ?? {
            reason: value.evaluation,
            changes: [],
          };
        }
        break;
      }
      case 'revision': {
        state.counters = afterRevision(state.counters);
        state.transcript.push({
          kind: 'revision',
          step,
          reason: entry.reason,
          changes: entry.changes,
        });
        const parsed = AgentPlan.safeParse(plan);
        if (parsed.success) state.plan = parsed.data;
        break;
      }
      default:
        break;
    }
  }
  // Legacy mode writes no plan; a run with any step recorded has passed its planning phase.
  if (records.length > 0) state.planned = true;
  if (state.awaiting) return state;
  const last = state.transcript.at(-1);
  if (last?.kind === 'action') {
    const trigger = reflectionTrigger(state.counters, lastActionFailed, planning);
    if (trigger) state = { ...state, pendingReflection: trigger };
  }
  return state;
}
