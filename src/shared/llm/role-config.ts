import type { LlmConfig, LlmRoleConfig, SessionConfig } from '../config/schema.js';
import type { ModelRole } from './chat.js';

export const MODEL_ROLES: readonly ModelRole[] = ['planner', 'judge', 'worker', 'replanner'];

/** A role's settings: llm.default with llm.<role> on top. */
export function roleConfig(llm: LlmConfig, role: ModelRole): LlmRoleConfig {
  return { ...llm.default, ...(llm[role] ?? {}) } as LlmRoleConfig;
}

/**
 * Every role's effective settings for a session. The replanner's time limit is seed 001's
 * replanning.timeoutSeconds, or llm.replanner.timeoutSeconds when that is set and lower.
 */
export function sessionRoleConfigs(config: SessionConfig): Record<ModelRole, LlmRoleConfig> {
  const configs = Object.fromEntries(
    MODEL_ROLES.map((role) => [role, roleConfig(config.llm, role)]),
  ) as Record<ModelRole, LlmRoleConfig>;
  const own = config.llm.replanner?.timeoutSeconds;
  const seed = config.replanning.timeoutSeconds;
  configs.replanner = {
    ...configs.replanner,
    timeoutSeconds: own !== undefined ? Math.min(own, seed) : seed,
  };
  return configs;
}
