import ms from 'ms';
import { readFileSync } from 'node:fs';
import { InvalidArgumentError } from 'commander';
import { resolve } from 'node:path';
import { loadConfig, parseConfigText } from '../../shared/config/load.js';
import type { OrqConfig, SessionConfig } from '../../shared/config/schema.js';
import { TaskId } from '../../shared/domain/task.js';
import type { Logger } from '../../shared/logger.js';
import {
  ConfigError,
  OrqError,
  parseOrThrow,
  unreadableReason,
  ValidationError,
  type FieldIssue,
} from '../../shared/errors.js';
import { isPlainObject, type PlainObject } from '../../shared/plain-object.js';
import { openClient, sessionConfig, SubmitRequest, type OrqClient } from '../client.js';
import { resolveSessionPaths } from './session-paths.js';
import { redisForCli, type CliRedis, type RedisForCliOptions } from './redis-for-cli.js';

/** `-c, --config`: every command that reads a configuration file takes it alike. */
export const configOption = ['-c, --config <file>', 'configuration file (YAML or JSON)'] as const;

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

/**
 * The instruction argument: `-` reads it from stdin (a long one, or one another program writes),
 * as `cat -` does. Checked as a submit checks it, before any Redis starts for the command.
 */
export function readInstruction(argument: string): string {
  const instruction = argument === '-' ? readStdin() : argument;
  parseOrThrow(SubmitRequest.pick({ instruction: true }), { instruction }, 'submit request');
  return instruction;
}

function readStdin(): string {
  try {
    return readFileSync(0, 'utf8');
  } catch (error) {
    throw new OrqError(
      'VALIDATION_FAILED',
      `Cannot read the instruction from stdin: ${unreadableReason(error)}`,
      {
        hint: 'Pipe the instruction in (`echo "…" | orq submit -`), or give it as the argument.',
        cause: error,
      },
    );
  }
}

export function printJson(value: unknown): void {
  process.stdout.write(`${JSON.stringify(value, null, 2)}\n`);
}

/** Commander reports an InvalidArgumentError as a usage error (exit 2) naming the option. */
export function parsePositiveInt(value: string): number {
  const n = Number(value);
  if (!Number.isSafeInteger(n) || n < 1)
    throw new InvalidArgumentError(`expected a positive whole number, got "${value}"`);
  return n;
}

/** A parser for a whole number from `min` to `max`, or a usage error naming the option. */
export function parseIntIn(min: number, max: number): (value: string) => number {
  return (value) => {
    const n = Number(value);
    if (!Number.isInteger(n) || n < min || n > max)
      throw new InvalidArgumentError(
        `expected a whole number from ${min} to ${max.toLocaleString('en-US')}, got "${value}"`,
      );
    return n;
  };
}

/** Ports: 0 asks the system for a free one where a command allows it. */
export const parsePort = parseIntIn(0, 65_535);
/** What a timer can wait (setTimeout's limit is about 24.8 days): one day. */
export const parseMilliseconds = parseIntIn(1, 86_400_000);
/** Per-role parallelism, as config.concurrency allows. */
export const parseConcurrency = parseIntIn(1, 1000);

/** A number above 0 (an amount such as USD), or a usage error naming the option. */
export function parsePositiveNumber(value: string): number {
  const n = Number(value);
  if (!Number.isFinite(n) || n <= 0)
    throw new InvalidArgumentError(`expected a number above 0, got "${value}"`);
  return n;
}

/**
 * `--task`, repeatable, each value one id or several separated by commas. Checked here, so a
 * bad id is a usage error naming `--task` before any Redis starts, not the resume request's
 * `taskIds` error after. A value with no id (`--task ''`) is refused: leaving it out would turn
 * a request for some tasks into one for every blocked task.
 */
export function parseTaskIds(value: string, previous: readonly string[] = []): string[] {
  const ids = value
    .split(',')
    .map((id) => id.trim())
    .filter((id) => id !== '');
  if (ids.length === 0)
    throw new InvalidArgumentError(
      'the task id is empty: give the id of a blocked task (`orq status <session>` lists them), or leave --task out for every blocked task',
    );
  for (const id of ids) {
    const checked = TaskId.safeParse(id);
    if (!checked.success)
      throw new InvalidArgumentError(
        `"${id}" is not a task id (${checked.error.issues.map((i) => i.message).join('; ')})`,
      );
  }
  return [...previous, ...ids];
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
    throw new ValidationError(overridesLabel(value), error.issues.flatMap(asWrittenInOverrides), {
      hint: 'Run `orq config schema` for every key, its type and default.',
    });
  }
}

/**
 * A submit names a session setting `config.<path>`; the overrides hold it as `<path>`. An
 * unknown key is named by itself, as `orq config check` names one in a file (`foo: unknown key
 * "foo"`), not as the submit's `config: unknown key "config.foo"`.
 */
function asWrittenInOverrides(issue: FieldIssue): FieldIssue[] {
  const unprefixed = (path: string) => path.replace(/^config\./, '');
  if (issue.message.startsWith('unknown key')) {
    const keys = [...issue.message.matchAll(/"config\.([^"]+)"/g)].map((match) => match[1]!);
    if (keys.length > 0) return keys.map((key) => ({ path: key, message: `unknown key "${key}"` }));
  }
  return [
    {
      ...issue,
      path: unprefixed(issue.path),
      ...(issue.settings ? { settings: issue.settings.map(unprefixed) } : {}),
    },
  ];
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
    const issues = error.issues.map((i) => `${i.path}: ${i.message}`).join('; ');
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

/**
 * `--older-than`: a duration with its unit (`90s`, `30m`, `12h`, `7d`, `2w`), in whole seconds.
 * A bare number is refused: minutes or days, a guess either way deletes the wrong sessions.
 */
export function parseDurationSeconds(value: string): number {
  const trimmed = value.trim();
  const millis =
    trimmed === '' || /^\d+(\.\d+)?$/.test(trimmed) ? undefined : ms(trimmed as ms.StringValue);
  if (millis === undefined || !Number.isFinite(millis) || millis < 0)
    throw new InvalidArgumentError(
      `expected a duration with a unit such as 90s, 30m, 12h, 7d or 2w, got "${value}"`,
    );
  return Math.floor(millis / 1000);
}
