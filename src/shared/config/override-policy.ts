import { isPlainObject } from '../plain-object.js';

/**
 * Which session settings a submit may override when the caller is not the operator (the HTTP
 * API). A pattern is a dotted config path; `*` stands for any one key (`llm.*.model` covers
 * `llm.default.model` and `llm.judge.model`) and a pattern covers everything under it, so `*`
 * alone covers every setting.
 */

/**
 * What a remote submit may set unless the operator says otherwise: how the session plans,
 * judges, retries and spends. It leaves out every setting that names a program, a file or
 * folder, a network endpoint or an environment variable: execution.command, mcpServers,
 * commandAllowlist and workspaceRoot; llm.*.baseUrl and apiKeyEnv; llm.scenario and
 * llm.record; planning.history. And execution.defaultExecutor and taskExecutors: the agent
 * executor runs programs its model picks, so which executor runs is the operator's choice too;
 * budget.maxTasks, which bounds how long one script may hold the operator's Redis; and
 * budget.prices, since a lower price lifts a maxUsd limit. What values a caller may give the
 * settings it may set is bounded too (caller-limits.ts): models the operator offers, budgets no
 * higher than the operator's.
 */
export const SAFE_SESSION_OVERRIDES: readonly string[] = [
  'refinement',
  'judging',
  'replanning',
  'planning.enabled',
  'planning.strategy',
  'planning.max_subtasks',
  'planning.decomposition_level',
  'planning.reflection',
  'planning.revision',
  'execution.maxContinuations',
  'execution.maxAgentActions',
  'execution.askHuman',
  'execution.toolTimeoutSeconds',
  'execution.toolMaxOutputBytes',
  'llm.*.provider',
  'llm.*.model',
  'llm.*.temperature',
  'llm.*.timeoutSeconds',
  'llm.*.maxRetries',
  'llm.*.maxOutputTokens',
  'llm.*.structuredOutput',
  'llm.*.toolCalling',
  'llm.maxRepairAttempts',
  'llm.judgeSamples',
  'budget.maxTokens',
  'budget.maxUsd',
  'budget.reserveTokensPerCall',
  'result',
  'approval.plan',
  'approval.steps',
  'approval.timeoutSeconds',
  'approval.onTimeout',
  'approval.stepTimeoutSeconds',
  'approval.onStepTimeout',
];

/** A pattern as the config accepts it: dotted keys or `*`, e.g. `llm.*.model`. */
export const OVERRIDE_PATTERN = /^(\*|[A-Za-z0-9_]+)(\.(\*|[A-Za-z0-9_]+))*$/;

/** Every path that sets a value: objects are walked, anything else (arrays too) is one leaf. */
export function overridePaths(overrides: unknown, parent: string[] = []): string[][] {
  if (!isPlainObject(overrides)) return parent.length > 0 ? [parent] : [];
  return Object.entries(overrides).flatMap(([key, value]) =>
    overridePaths(value, [...parent, key]),
  );
}

function covers(pattern: string, path: readonly string[]): boolean {
  const segments = pattern.split('.');
  return (
    segments.length <= path.length &&
    segments.every((segment, i) => segment === '*' || segment === path[i])
  );
}

/** The overridden paths (dotted) that no pattern of `allowed` covers, in the request's order. */
export function overridesOutside(overrides: unknown, allowed: readonly string[]): string[] {
  return overridePaths(overrides)
    .filter((path) => !allowed.some((pattern) => covers(pattern, path)))
    .map((path) => path.join('.'));
}
