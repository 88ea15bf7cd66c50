import type { FieldIssue } from '../errors.js';
import { leastReservation, unpricedModels } from '../budget.js';
import { MODEL_ROLES, outputCap, roleConfig } from './roles.js';
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
    const example = provider === 'anthropic' ? 'claude-sonnet-5-5' : 'gpt-4o-mini';
    issues.set(
      path,
      `provider ${provider} needs a model name (e.g. ${example}); "builtin" names the offline builtin provider's only`,
    );
  }
  if (budget.maxTokens !== undefined) {
    // Every call reserves at least its output limit: a role whose limit passes maxTokens never runs.
    const [role, least] = MODEL_ROLES.map((r) => [r, leastReservation(config, r)] as const).reduce(
      (a, b) => (b[1] > a[1] ? b : a),
    );
    const own = roleConfig(llm, role);
    const capped = own.provider !== 'builtin' && outputCap(own) !== undefined;
    if (budget.maxTokens < least) {
      issues.set(
        'budget.maxTokens',
        capped
          ? `${budget.maxTokens} is less than one ${role} call's reservation (its output limit, ${least} tokens), so its first call would stop the session; raise maxTokens or set a lower llm.${role}.maxOutputTokens`
          : `${budget.maxTokens} is less than one call's reservation (budget.reserveTokensPerCall ${budget.reserveTokensPerCall}), so the first model call would stop the session; raise maxTokens or lower reserveTokensPerCall`,
      );
    }
  }
  return [...issues].map(([path, message]) => ({ path, message }));
}

/**
 * Every setting a submit refuses in a session's config: the unworkable ones, and a maxUsd budget
 * with a model the roles use that it has no price for (it could not count that model's calls).
 * `orq config check` runs the same checks, so it finds what a run of the file would refuse.
 */
export function unsubmittableSettings(config: SessionConfig): FieldIssue[] {
  const issues = unworkableSettings(config);
  // A model named "builtin" for a real provider is already refused; its price is not the point.
  if (issues.length > 0) return issues;
  const unpriced = config.budget.maxUsd === undefined ? [] : unpricedModels(config);
  if (unpriced.length === 0) return [];
  const message = `maxUsd needs a price for every model the roles use; none for ${unpriced.join(', ')}`;
  return [{ path: 'budget.prices', message, settings: ['budget.maxUsd'] }];
}
