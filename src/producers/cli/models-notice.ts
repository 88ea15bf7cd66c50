import { relative, isAbsolute } from 'node:path';
import type { LlmConfig, LlmRoleConfig } from '../../shared/config/schema.js';
import { BUILTIN_PROVIDER, builtinRoles, listWords } from '../../shared/config/builtin-roles.js';
import { type ModelRole, MODEL_ROLES, roleConfig } from '../../shared/config/roles.js';
import { DEFAULT_KEY_ENV, keyIsSet } from '../../shared/config/provider-keys.js';

/**
 * What `orq run`, `orq start` and `orq dashboard` say once on stderr of the models each role
 * uses (issue 51): a newcomer must not take the builtin provider's plan, score and DONE tasks for
 * a model's work. On stderr, so that stdout stays the command's own (`--json`, the dashboard's
 * addresses).
 *
 * - run: the session it submits.
 * - pod: the sessions submitted with the pod's config; a session's own llm settings decide.
 * - dashboard: the sessions submitted over its HTTP API, which start from its config.
 */
export type NoticeAudience = 'run' | 'pod' | 'dashboard';

export interface ModelsNoticeInput {
  llm: LlmConfig;
  audience: NoticeAudience;
  /** The roles this process runs (a pod's --roles); all of them when absent. */
  roles?: readonly string[];
  /** Which of OPENAI_API_KEY and ANTHROPIC_API_KEY have a key here (keyIsSet). */
  keysSet: readonly string[];
  /** Paths under it (the scenario, a recording) are shown relative to it. */
  cwd?: string;
}

/** What each audience's sessions are called. */
const SESSIONS: Record<NoticeAudience, { done: string; models: string }> = {
  run: { done: 'this', models: 'models' },
  pod: {
    done: "the sessions submitted with this config (a session's own llm settings decide)",
    models:
      "models of the sessions submitted with this config (a session's own llm settings decide)",
  },
  dashboard: {
    done: 'the sessions submitted here',
    models: 'models of the sessions submitted here',
  },
};

/** What the builtin provider does in each role, in the order a sentence lists them. */
const VERBS: [verb: string, roles: readonly ModelRole[]][] = [
  ['plans', ['planner', 'replanner']],
  ['judges', ['judge']],
  ['runs', ['worker']],
];

/** The setting that puts a key that is set to use: one per provider, with a model it serves. */
const USE_KEY: Record<keyof typeof DEFAULT_KEY_ENV, string> = {
  openai: 'ORQ__llm__default__provider=openai ORQ__llm__default__model=gpt-4o-mini',
  anthropic: 'ORQ__llm__default__provider=anthropic ORQ__llm__default__model=claude-sonnet-5-5',
};

/** The lines to write on stderr, each ending in a newline; '' when the process runs no model role. */
export function modelsNotice(input: ModelsNoticeInput): string {
  const { llm, audience } = input;
  const roles = MODEL_ROLES.filter((role) => !input.roles || input.roles.includes(role));
  if (roles.length === 0) return '';
  const shownPath = (path: string) => pathFrom(input.cwd, path);
  const builtin = builtinRoles(llm);
  const sessions = SESSIONS[audience];
  const lines: string[] = [];
  const noModel = builtin.length === MODEL_ROLES.length;
  if (noModel) {
    const verbs = VERBS.filter(([, by]) => by.some((role) => roles.includes(role))).map(
      ([verb]) => verb,
    );
    const scripted = llm.scenario ? `, scripted by ${shownPath(llm.scenario)},` : '';
    lines.push(
      `no model configured: ${BUILTIN_PROVIDER}${scripted} ${listWords(verbs)} ${sessions.done}; see docs/providers.md to use a model`,
    );
  } else {
    const groups = new Map<string, ModelRole[]>();
    for (const role of roles) {
      const described = describeRole(roleConfig(llm, role));
      groups.set(described, [...(groups.get(described) ?? []), role]);
    }
    const each = [...groups].map(([described, by]) => `${by.join(', ')}: ${described}`);
    lines.push(`${sessions.models}: ${each.join('; ')}${recording(llm, shownPath)}`);
  }
  // A key set for a provider nothing is configured for: the newcomer who exported it expects it
  // to be used. A scenario asks for the builtin provider on purpose.
  if (noModel && !llm.scenario) {
    for (const [provider, variable] of Object.entries(DEFAULT_KEY_ENV)) {
      if (!input.keysSet.includes(variable)) continue;
      lines.push(
        `${variable} is set but unused: to use it, set ${USE_KEY[provider as keyof typeof DEFAULT_KEY_ENV]} (or llm.default in orq.config.yaml; docs/providers.md)`,
      );
    }
  }
  return lines.map((line) => `orq: ${line}\n`).join('');
}

/** `openai gpt-4o-mini at http://localhost:11434/v1`, or the builtin provider. */
function describeRole(config: LlmRoleConfig): string {
  if (config.provider === 'builtin') return 'builtin (a rule set, not an LLM)';
  const server = config.baseUrl ? ` at ${withoutCredentials(config.baseUrl)}` : '';
  return `${config.provider} ${config.model}${server}`;
}

/** Where the models' answers come from or go when record/replay is on. */
function recording(llm: LlmConfig, shownPath: (path: string) => string): string {
  const { mode, path } = llm.record;
  if (mode === 'replay') return `; replayed from ${shownPath(path)}: no model is called`;
  if (mode === 'record') return `; recorded in ${shownPath(path)}`;
  return '';
}

/** A URL without its user and password: the line may end up in a pod's logs. */
function withoutCredentials(url: string): string {
  try {
    const parsed = new URL(url);
    if (!parsed.username && !parsed.password) return url;
    parsed.username = '';
    parsed.password = '';
    return parsed.toString();
  } catch {
    return url;
  }
}

/** A path under `cwd` relative to it (as the user typed it, usually); others as they are. */
function pathFrom(cwd: string | undefined, path: string): string {
  if (!cwd || !isAbsolute(path)) return path;
  const from = relative(cwd, path);
  return from && !from.startsWith('..') && !isAbsolute(from) ? from : path;
}

/** Which of the providers' usual key variables have a key in this process, taken or not. */
export function keysSetHere(): string[] {
  return Object.values(DEFAULT_KEY_ENV).filter((variable) => keyIsSet(variable));
}
