import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { loadConfig, parseConfigText } from '../../shared/config/load.js';
import type { OrqConfig, SessionConfig } from '../../shared/config/schema.js';
import type { Logger } from '../../shared/logger.js';
import {
  ConfigError,
  issueText,
  OrqError,
  unknownKeyMessage,
  unreadableReason,
  ValidationError,
  type FieldIssue,
} from '../../shared/errors.js';
import { isPlainObject, type PlainObject } from '../../shared/plain-object.js';
import { openClient, sessionConfig, type OrqClient } from '../client.js';
import { resolveSessionPaths } from './session-paths.js';
import { redisForCli, type CliRedis, type RedisForCliOptions } from './redis-for-cli.js';

export interface GlobalOptions {
  config?: string;
}

/**
 * The configuration a command reads. `submitChecks`: the command submits a session with the
 * configuration's own session settings, so what the submit would refuse is the configuration's
 * error, naming its file.
 */
export function cliConfig(
  options: GlobalOptions & { scenario?: string },
  { submitChecks = false }: { submitChecks?: boolean } = {},
): OrqConfig {
  return loadConfig({
    ...(options.config ? { file: options.config } : {}),
    ...(options.scenario ? { overrides: { llm: { scenario: resolve(options.scenario) } } } : {}),
    submitChecks,
  });
}

export interface WithClientOptions extends RedisForCliOptions {
  /** The configuration the command loaded already (to check it before Redis starts). */
  config?: OrqConfig;
  /** Where the client tells a Redis outage (a command that runs until stopped: the dashboard). */
  logger?: Logger;
}

/** Runs `fn` with a client on the CLI's Redis, and always releases both. */
export async function withClient<T>(
  options: GlobalOptions,
  fn: (client: OrqClient, config: OrqConfig, redis: CliRedis) => Promise<T>,
  { config: loaded, logger, ...redisOptions }: WithClientOptions = {},
): Promise<T> {
  const config = loaded ?? cliConfig(options);
  const redis = await redisForCli(config, redisOptions);
  try {
    // The CLI's user names Redis with REDIS_URL: the hints of connection errors say so.
    const client = await openClient(
      { connection: redis.connection, config, ...(logger ? { logger } : {}) },
      'REDIS_URL',
    );
    try {
      return await fn(client, config, redis);
    } finally {
      await client.close();
    }
  } finally {
    await redis.release();
  }
}

/**
 * withClient for commands about existing sessions: with no Redis to find them in (no REDIS_URL,
 * no private Redis here) they say so, rather than start an empty server and leave .orq/ behind.
 */
export function withSessions<T>(
  options: GlobalOptions,
  fn: (client: OrqClient, config: OrqConfig, redis: CliRedis) => Promise<T>,
  { config }: { config?: OrqConfig } = {},
): Promise<T> {
  return withClient(options, fn, { existing: true, ...(config ? { config } : {}) });
}

export function printJson(value: unknown): void {
  process.stdout.write(`${JSON.stringify(value, null, 2)}\n`);
}

/**
 * `--session-config`: per-session overrides as inline JSON, or the path of a YAML or JSON file.
 * Relative paths in them are resolved here, where the user typed them (session-paths.ts).
 */
export function sessionOverrides(
  value: string | undefined,
  cwd: string = process.cwd(),
): PlainObject | undefined {
  if (!value) return undefined;
  const parsed = isInline(value) ? parseInlineOverrides(value) : parseOverridesFile(value);
  if (!isPlainObject(parsed)) {
    throw new OrqError(
      'VALIDATION_FAILED',
      `${overridesLabel(value)} must hold an object of settings`,
      {
        hint: OVERRIDES_HINT,
      },
    );
  }
  return resolveSessionPaths(parsed, cwd);
}

const isInline = (value: string) => value.trim().startsWith('{');

/** How errors name the overrides: the option, and the file when they came from one. */
const overridesLabel = (value: string) =>
  isInline(value) ? '--session-config' : `--session-config ${value}`;

/**
 * The session config a submit of `overrides` (from `--session-config value`) over `config`
 * gets, checked before any Redis starts. A problem only the overrides bring is theirs: it
 * names --session-config and the settings as written there. One the configuration has on its
 * own is the configuration's: `checkConfig` (the command's cliConfig by default) loads it with
 * the submit's checks, and throws the loader's error, which names the file or the variable that
 * set it.
 */
export function submittedSessionConfig(
  config: OrqConfig,
  overrides: PlainObject | undefined,
  options: GlobalOptions & { scenario?: string; sessionConfig?: string },
  checkConfig: () => unknown = () => cliConfig(options, { submitChecks: true }),
): SessionConfig {
  const value = options.sessionConfig;
  try {
    return sessionConfig(config, overrides);
  } catch (error) {
    if (!(error instanceof ValidationError) || !overrides || !value) throw error;
    try {
      sessionConfig(config, undefined);
    } catch {
      checkConfig();
      throw error;
    }
    throw new ValidationError(overridesLabel(value), error.issues.map(asWrittenInOverrides), {
      hint: 'Run `orq config schema` for every key, its type and default.',
    });
  }
}

/**
 * A submit names a session setting `config.<path>`; the overrides hold it as `<path>`. An
 * unknown key is named as `orq config check` names one in a file (`unknown key "foo" at the
 * top level`), not as the submit's `unknown key "config.foo"`.
 */
function asWrittenInOverrides(issue: FieldIssue): FieldIssue {
  const unprefixed = (path: string) => path.replace(/^config\./, '');
  const path = unprefixed(issue.path);
  if (issue.message === unknownKeyMessage(issue.path.split('.')))
    return { path, message: unknownKeyMessage(path.split('.')) };
  return {
    ...issue,
    path,
    ...(issue.settings ? { settings: issue.settings.map(unprefixed) } : {}),
  };
}

const OVERRIDES_HINT =
  'Give a JSON object, such as {"budget":{"maxTokens":50000}}, or the path of a YAML or JSON file holding one';

function parseInlineOverrides(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch (error) {
    throw new OrqError(
      'VALIDATION_FAILED',
      `--session-config is not valid JSON: ${(error as Error).message}`,
      { hint: OVERRIDES_HINT },
    );
  }
}

function parseOverridesFile(path: string): unknown {
  const text = readOverridesFile(path);
  try {
    return parseConfigText(text, path);
  } catch (error) {
    if (!(error instanceof ConfigError)) throw error;
    // A syntax error, with its line: the same code and hint as every --session-config error.
    const issues = error.issues.map(issueText).join('; ');
    throw new OrqError('VALIDATION_FAILED', `--session-config ${path}: ${issues}`, {
      hint: OVERRIDES_HINT,
    });
  }
}

function readOverridesFile(path: string): string {
  try {
    return readFileSync(path, 'utf8').replace(/^\uFEFF/, '');
  } catch (error) {
    throw new OrqError(
      'VALIDATION_FAILED',
      `--session-config ${path}: cannot read the file (${unreadableReason(error)})`,
      { hint: OVERRIDES_HINT },
    );
  }
}
