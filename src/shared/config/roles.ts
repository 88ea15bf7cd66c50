import type { LlmConfig, LlmRoleConfig, SessionConfig } from './schema.js';

/** The roles that call models, and the settings each one runs with (llm.default under llm.<role>). */
export type ModelRole = 'planner' | 'judge' | 'worker' | 'replanner';

/**
 * Anthropic's messages API requires max_tokens; this is sent when the role's maxOutputTokens is
 * unset. Room for a long worker reply, every current model allows it, and it stays under the
 * size the SDK expects to take over 10 minutes without streaming (about 21,000 tokens).
 */
export const DEFAULT_ANTHROPIC_MAX_TOKENS = 16_384;

export const MODEL_ROLES: readonly ModelRole[] = ['planner', 'judge', 'worker', 'replanner'];

/**
 * The settings that belong to one provider kind: where its server is, which key it takes, its
 * quota and its model names. A role that names another kind than llm.default does not inherit
 * them (an Ollama default's baseUrl would send an Anthropic planner to `…/v1/v1/messages` with
 * Ollama's placeholder key); it gets that kind's own defaults instead.
 */
const PROVIDER_SETTINGS = ['baseUrl', 'apiKeyEnv', 'rateLimit'] as const;

/** A role's settings: llm.default with llm.<role> on top. */
export function roleConfig(llm: LlmConfig, role: ModelRole): LlmRoleConfig {
  const own = llm[role] ?? {};
  const base: Partial<LlmRoleConfig> = { ...llm.default };
  if (own.provider !== undefined && own.provider !== llm.default.provider) {
    for (const setting of PROVIDER_SETTINGS) delete base[setting];
    // The schema's "no model": a real provider without its own is refused (unworkable.ts).
    base.model = 'builtin';
  }
  return { ...base, ...own } as LlmRoleConfig;
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

/** The output limit a call sends: Anthropic always sends one, OpenAI only when it is set. */
export function outputCap(config: LlmRoleConfig): number | undefined {
  return (
    config.maxOutputTokens ??
    (config.provider === 'anthropic' ? DEFAULT_ANTHROPIC_MAX_TOKENS : undefined)
  );
}
