import type { FieldIssue } from '../errors.js';
import { MODEL_ROLES, roleConfig } from '../llm/role-config.js';
import type { SessionConfig } from './schema.js';

/**
 * Settings each valid on its own that together cannot work: caught when the config is read or
 * a session submitted, not minutes later in a model call or as a session stopped at once.
 */
export function unworkableSettings(config: SessionConfig): FieldIssue[] {
  const issues = new Map<string, string>();
  const { llm, budget } = config;
  for (const role of MODEL_ROLES) {
    const { provider, model } = roleConfig(llm, role);
    // 'builtin' is the default model name: a real provider given no model would be sent it.
    if (provider === 'builtin' || model !== 'builtin') continue;
    const path = llm[role]?.provider !== undefined ? `llm.${role}.model` : 'llm.default.model';
    const example = provider === 'anthropic' ? 'claude-sonnet-4-5' : 'gpt-4o-mini';
    issues.set(
      path,
      `provider ${provider} needs a model name (e.g. ${example}); "builtin" names the offline builtin provider's only`,
    );
  }
  if (budget.maxTokens !== undefined && budget.maxTokens < budget.reserveTokensPerCall) {
    issues.set(
      'budget.maxTokens',
      `${budget.maxTokens} is less than one call's reservation (budget.reserveTokensPerCall ${budget.reserveTokensPerCall}), so the first model call would stop the session; raise maxTokens or lower reserveTokensPerCall`,
    );
  }
  return [...issues].map(([path, message]) => ({ path, message }));
}
