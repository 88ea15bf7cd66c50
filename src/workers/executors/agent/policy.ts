import type { PlanningConfig } from '../../../shared/config/schema.js';

/**
 * The decisions of seed 004's loop, as pure functions of counters and config: when to reflect,
 * whether a revision is still allowed, and when the action budget is spent. Every loop of the
 * agent is bounded by these (DESIGN.md: every loop is bounded).
 */
export interface AgentCounters {
  /** Tool calls made in this execution attempt. */
  actions: number;
  /** Tool calls since the last reflection (or since the start). */
  actionsSinceReflection: number;
  reflections: number;
  /** Plan revisions made in this execution attempt. */
  revisions: number;
}

export const INITIAL_COUNTERS: AgentCounters = {
  actions: 0,
  actionsSinceReflection: 0,
  reflections: 0,
  revisions: 0,
};

export type ReflectionTrigger = 'error' | 'interval';

/**
 * Why the agent should reflect now, or undefined. Reflection belongs to planning mode: with
 * planning or reflection disabled the agent never reflects (seed 004's legacy mode). An error
 * triggers it when trigger_on_error is set; otherwise every trigger_interval actions do.
 */
export function reflectionTrigger(
  counters: AgentCounters,
  lastActionFailed: boolean,
  config: PlanningConfig,
): ReflectionTrigger | undefined {
  if (!config.enabled || !config.reflection.enabled) return undefined;
  if (counters.actionsSinceReflection === 0) return undefined;
  if (lastActionFailed && config.reflection.trigger_on_error) return 'error';
  if (counters.actionsSinceReflection >= config.reflection.trigger_interval) return 'interval';
  return undefined;
}

export function shouldReflect(
  counters: AgentCounters,
  lastActionFailed: boolean,
  config: PlanningConfig,
): boolean {
  return reflectionTrigger(counters, lastActionFailed, config) !== undefined;
}

/** A revision is allowed in planning mode while fewer than max_revisions have been made. */
export function canRevise(counters: AgentCounters, config: PlanningConfig): boolean {
  return config.enabled && counters.revisions < config.revision.max_revisions;
}

/** The run stops, done or not, once it has made `maxActions` tool calls. */
export function isBudgetSpent(counters: AgentCounters, maxActions: number): boolean {
  return counters.actions >= maxActions;
}

export function afterAction(counters: AgentCounters): AgentCounters {
  return {
    ...counters,
    actions: counters.actions + 1,
    actionsSinceReflection: counters.actionsSinceReflection + 1,
  };
}

export function afterReflection(counters: AgentCounters): AgentCounters {
  return { ...counters, reflections: counters.reflections + 1, actionsSinceReflection: 0 };
}

export function afterRevision(counters: AgentCounters): AgentCounters {
  return { ...counters, revisions: counters.revisions + 1 };
}
