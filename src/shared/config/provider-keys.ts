import { readFileSync } from 'node:fs';
import type { OrqConfig } from './schema.js';
import { OrqError } from '../errors.js';

/**
 * Provider API keys, held here and nowhere else in the process (issue 41).
 *
 * A key named by an environment variable is taken out of `process.env` when first read (or at a
 * pod's start, takeProviderKeys), so no child process inherits it (a coding agent, a tool's
 * program) and no later code finds it there. Deleting from `process.env` does not change
 * /proc/<pid>/environ, the environment the process started with: a key kept out of the
 * environment altogether comes from a file, named by `<VARIABLE>_FILE` (the convention of
 * Docker's and Kubernetes' secret files). The variable's name stays with the pod, so a session's
 * config (which travels through Redis) names no file.
 */

/** The variable each provider's key is read from unless llm.*.apiKeyEnv names another. */
export const DEFAULT_KEY_ENV = {
  openai: 'OPENAI_API_KEY',
  anthropic: 'ANTHROPIC_API_KEY',
} as const;

/** Keys taken out of process.env, by variable. */
const taken = new Map<string, string>();
/** Keys read from files, by path: read once, so a rotated file needs a restart. */
const fromFiles = new Map<string, string>();
/** Files named by a key variable's `_FILE` at a pod's start, read or not yet (keyFiles). */
const namedFiles = new Set<string>();

/** Moves `variable` from process.env into this module; its key, if it ever had one. */
function takeFromProcessEnv(variable: string): string | undefined {
  const value = process.env[variable];
  if (value !== undefined) {
    delete process.env[variable];
    const key = value.trim();
    if (key) taken.set(variable, key);
    else taken.delete(variable);
  }
  return taken.get(variable);
}

function readKeyFile(variable: string, path: string): string {
  const known = fromFiles.get(path);
  if (known !== undefined) return known;
  let key: string;
  try {
    key = readFileSync(path, 'utf8').trim();
  } catch (error) {
    const reason = (error as NodeJS.ErrnoException).code ?? String(error);
    throw new OrqError(
      'CONFIG_INVALID',
      `The API key file ${path} (named by ${variable}_FILE) cannot be read: ${reason}`,
      {
        hint: `Mount the secret at ${path}, or point ${variable}_FILE at the file that holds the key`,
        details: { variable: `${variable}_FILE`, path },
        cause: error,
      },
    );
  }
  if (!key) {
    throw new OrqError(
      'CONFIG_INVALID',
      `The API key file ${path} (named by ${variable}_FILE) is empty`,
      { hint: 'Put the key in the file', details: { variable: `${variable}_FILE`, path } },
    );
  }
  fromFiles.set(path, key);
  return key;
}

/**
 * The key named by `variable`: from the environment (taken out of it when that is
 * process.env), or from the file `<variable>_FILE` names. Undefined when neither is set; both
 * set is an error, since which one is meant cannot be told.
 */
export function providerKey(
  variable: string,
  env: NodeJS.ProcessEnv = process.env,
): string | undefined {
  const fromEnv =
    env === process.env ? takeFromProcessEnv(variable) : env[variable]?.trim() || undefined;
  const file = env[`${variable}_FILE`]?.trim();
  if (fromEnv !== undefined && file) {
    throw new OrqError('CONFIG_INVALID', `Both ${variable} and ${variable}_FILE are set`, {
      hint: `Set one of them: ${variable}_FILE keeps the key out of the process's environment`,
      details: { variable },
    });
  }
  if (fromEnv !== undefined) return fromEnv;
  return file ? readKeyFile(variable, file) : undefined;
}

/**
 * Whether a key is set for `variable`, in the environment or as `<variable>_FILE`, without
 * reading or taking it. A key already taken out of process.env (takeProviderKeys) still counts:
 * what a command says of the keys it has may come after its pod took them.
 */
export function keyIsSet(variable: string, env: NodeJS.ProcessEnv = process.env): boolean {
  if (env === process.env && taken.has(variable)) return true;
  return Boolean(env[variable]?.trim() || env[`${variable}_FILE`]?.trim());
}

/**
 * The variables a pod's config reads keys from: the providers' usual ones and every
 * llm.*.apiKeyEnv. A session may name another variable; that one is taken when first read.
 */
export function keyVariables(config: Pick<OrqConfig, 'llm'>): string[] {
  const { llm } = config;
  const named = [llm.default, llm.planner, llm.judge, llm.worker, llm.replanner].flatMap((role) =>
    role?.apiKeyEnv ? [role.apiKeyEnv] : [],
  );
  return [...new Set([...Object.values(DEFAULT_KEY_ENV), ...named])];
}

/**
 * Takes the keys of `variables` out of process.env now, at a pod's start: a program started
 * before the first model call does not inherit them either.
 */
export function takeProviderKeys(variables: Iterable<string>): void {
  for (const variable of variables) {
    takeFromProcessEnv(variable);
    const file = process.env[`${variable}_FILE`]?.trim();
    if (file) namedFiles.add(file);
  }
}

/**
 * The files this process reads provider keys from, or will: the tools' sandbox hides them
 * from the programs it runs (sandbox.ts), which could read them otherwise.
 */
export function keyFiles(): string[] {
  return [...new Set([...namedFiles, ...fromFiles.keys()])];
}
