import type { LlmConfig } from './schema.js';
import type { BuiltinUse } from '../domain/result.js';
import { type ModelRole, MODEL_ROLES, roleConfig } from './roles.js';

/**
 * Which roles of a session the builtin provider plays (issue 51). It is a rule set, not an LLM:
 * a newcomer who sees a plan, a judge's score and DONE tasks must be told that no model made
 * them. Every surface that says so (`orq run`'s models line, `orq result`, the session view,
 * GET /sessions/:id) reads it here, from the session's own config, so they cannot disagree.
 */

/** How every surface names the builtin provider. */
export const BUILTIN_PROVIDER = 'the builtin provider (a rule set, not an LLM)';

/** The model roles whose provider is builtin, in the order MODEL_ROLES lists them. */
export function builtinRoles(llm: LlmConfig): ModelRole[] {
  return MODEL_ROLES.filter((role) => roleConfig(llm, role).provider === 'builtin');
}

/**
 * What GET /sessions/:id, client.get() and a session's result say of the builtin provider, from
 * the session's config: `ranByBuiltin` when it played one or more of the model roles (a
 * scenario's scripted runs included), and which.
 */
export function builtinUse(config: { llm: LlmConfig }): BuiltinUse {
  const roles = builtinRoles(config.llm);
  return { ranByBuiltin: roles.length > 0, builtinRoles: roles };
}

/** `a`, `a and b`, `a, b and c`. */
export function listWords(words: readonly string[]): string {
  return words.length > 1
    ? `${words.slice(0, -1).join(', ')} and ${words.at(-1)}`
    : (words[0] ?? '');
}

/**
 * One sentence for a person reading a session (`orq result`, `orq run`'s result, the session
 * view) that the builtin provider played `roles` (builtinRoles); undefined for none.
 */
export function builtinNote(roles: readonly ModelRole[]): string | undefined {
  if (roles.length === 0) return undefined;
  if (roles.length === MODEL_ROLES.length) {
    return `No model ran this session: ${BUILTIN_PROVIDER} planned, judged and executed it. See docs/providers.md to use a model.`;
  }
  return `${capitalised(BUILTIN_PROVIDER)} played the ${listWords(roles)} of this session, not a model.`;
}

const capitalised = (text: string) => text.charAt(0).toUpperCase() + text.slice(1);
