import { OrqError } from '../../../shared/errors.js';
import { createBuiltinAgentModel } from './builtin-model.js';
import {
  actionCount,
  reflectionCount,
  type AgentDecision,
  type AgentModel,
  type AgentPlan,
  type AgentReflection,
} from './types.js';

/** A scripted model call that throws, like a provider error or a crash of the run. */
export interface ScriptedAgentFailure {
  error: string;
}

/**
 * What a scripted agent answers. Actions are indexed by the number of actions the run has made
 * and reflections by the number of reflections, both read from the transcript rather than
 * counted in memory, so a resumed run (or another process) gets the same next answer.
 */
export interface AgentScript {
  /** The plan; the builtin agent's plan when omitted. */
  plan?: AgentPlan | ScriptedAgentFailure;
  /** Decision n is the answer when n actions have been made; past the end: done. */
  actions: (AgentDecision | ScriptedAgentFailure)[];
  /** Reflection n; past the end: success, no revision needed. */
  reflections?: (AgentReflection | ScriptedAgentFailure)[];
}

export interface ScriptedAgentModel extends AgentModel {
  /** How often each phase was called, for tests (a resumed run must not plan again). */
  readonly calls: { plan: number; nextAction: number; reflect: number };
}

const NO_USAGE = { inputTokens: 0, outputTokens: 0 };

function unlessFailure<T extends object>(
  entry: T | ScriptedAgentFailure | undefined,
  what: string,
): T | undefined {
  if (entry && 'error' in entry && Object.keys(entry).length === 1) {
    throw new OrqError('LLM_CALL_FAILED', `Scripted agent ${what} failure: ${entry.error}`, {
      details: { scripted: true },
    });
  }
  return entry as T | undefined;
}

/** An AgentModel that replays a script: for tests and for reproducing a run exactly. */
export function createScriptedAgentModel(script: AgentScript): ScriptedAgentModel {
  const fallback = createBuiltinAgentModel();
  const calls = { plan: 0, nextAction: 0, reflect: 0 };
  return {
    label: 'scripted agent',
    calls,
    async plan(request) {
      calls.plan += 1;
      const plan = unlessFailure(script.plan, 'plan');
      return plan ? { value: structuredClone(plan), usage: NO_USAGE } : fallback.plan(request);
    },
    async nextAction(request) {
      calls.nextAction += 1;
      const index = actionCount(request.transcript);
      const decision = unlessFailure(script.actions[index], `action ${index}`);
      return {
        value: decision
          ? structuredClone(decision)
          : { done: true, summary: 'The script has no more actions.' },
        usage: NO_USAGE,
      };
    },
    async reflect(request) {
      calls.reflect += 1;
      const index = reflectionCount(request.transcript);
      const reflection = unlessFailure(script.reflections?.[index], `reflection ${index}`);
      return {
        value: reflection
          ? structuredClone(reflection)
          : { status: 'success', evaluation: 'On track.', plan_revision_needed: false },
        usage: NO_USAGE,
      };
    },
  };
}
