/**
 * A submitted session's config: the client's defaults with the request's overrides, and the
 * limits on what a caller who is not the operator (the HTTP API) may override.
 */
import { applyLegacyKeys, mergeConfig } from '../../shared/config/load.js';
import { callerLimitIssues } from '../../shared/config/caller-limits.js';
import { overridesOutside } from '../../shared/config/override-policy.js';
import { unsubmittableSettings } from '../../shared/config/unworkable.js';
import { SessionConfig, type OrqConfig } from '../../shared/config/schema.js';
import {
  describeZodIssues,
  OrqError,
  parseForPeople,
  ValidationError,
} from '../../shared/errors.js';

// Every part of SessionConfig, read off the schema: a hand-kept list once missed judging and
// scheduling, so the config file's values for them never reached a session.
const SESSION_CONFIG_KEYS = Object.keys(SessionConfig.shape) as (keyof SessionConfig)[];

/** Refuses a request that sets a session setting outside `allowed`, naming each one. */
export function assertOverridesAllowed(overrides: unknown, allowed: readonly string[]): void {
  const refused = overridesOutside(applyLegacyKeys(overrides ?? {}), allowed);
  if (refused.length === 0) return;
  const paths = refused.map((path) => `config.${path}`);
  throw new OrqError(
    'FORBIDDEN',
    `this API does not let a submit set ${paths.join(', ')}: ${refused.length === 1 ? 'it names' : 'they name'} what the operator decides (a program, file, endpoint, environment variable or executor)`,
    {
      hint: `Leave ${refused.length === 1 ? 'it' : 'them'} out to use the pods' own settings. The operator allows settings with http.sessionOverrides (now: ${allowed.length > 0 ? allowed.join(', ') : 'none'}).`,
      details: { refused: paths },
    },
  );
}

/** Refuses a caller's model or budget choice the operator does not offer, naming each one. */
export function assertWithinCallerLimits(
  operator: SessionConfig,
  chosen: SessionConfig,
  offeredModels: readonly string[],
): void {
  const issues = callerLimitIssues(operator, chosen, offeredModels);
  if (issues.length === 0) return;
  throw new OrqError(
    'FORBIDDEN',
    `this API does not let a submit choose ${issues.map((issue) => `${issue.path} (${issue.message})`).join('; ')}`,
    {
      hint: "Choose among the offered models, or leave them out to use the pods' own; a budget may only be lowered. The operator offers more models with http.models.",
      details: { refused: issues.map((issue) => issue.path) },
    },
  );
}

/** Builds the session's effective config: client defaults, then the request's overrides. */
export function sessionConfig(
  base: OrqConfig,
  overrides: Record<string, unknown> | undefined,
): SessionConfig {
  const defaults = Object.fromEntries(SESSION_CONFIG_KEYS.map((k) => [k, base[k]]));
  // The request's legacy maxQualityRetries must map to maxRefinementAttempts before the merge:
  // the defaults always carry maxRefinementAttempts, which would otherwise always win (seed 000).
  const merged = mergeConfig(defaults, applyLegacyKeys(overrides ?? {}));
  const result = parseForPeople(SessionConfig, merged);
  if (!result.success) {
    throw new ValidationError('submit request', describeZodIssues(result.error, 'config'));
  }
  const unsubmittable = unsubmittableSettings(result.data).map((issue) => ({
    ...issue,
    path: `config.${issue.path}`,
    ...(issue.settings ? { settings: issue.settings.map((path) => `config.${path}`) } : {}),
  }));
  if (unsubmittable.length > 0) throw new ValidationError('submit request', unsubmittable);
  return result.data;
}
