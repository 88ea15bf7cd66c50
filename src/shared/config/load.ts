import { existsSync, readFileSync } from 'node:fs';
import { extname, join } from 'node:path';
import { parse as parseYaml, YAMLParseError } from 'yaml';
import { z } from 'zod';
import { unwrapSchema } from './schema-walk.js';
import {
  ConfigError,
  describeZodIssues,
  OrqError,
  parseForPeople,
  unknownKeyMessage,
  unreadableReason,
  type FieldIssue,
} from '../errors.js';
import { OrqConfig } from './schema.js';
import { unsubmittableSettings, unworkableSettings } from './unworkable.js';
import { isPlainObject, setValueAtPath, valueAtPath, type PlainObject } from '../plain-object.js';

/** Looked for, in this order, in the working directory when no file is named. */
export const DEFAULT_CONFIG_FILES = ['orq.config.yaml', 'orq.config.yml', 'orq.config.json'];

/** Generic environment overrides: `ORQ__refinement__noiseThreshold=4`. */
export const ENV_PREFIX = 'ORQ__';
const ENV_SEPARATOR = '__';

/** Where a ConfigError says bad values from environment variables are. */
const ENVIRONMENT = 'the environment';

/** Environment variables with a fixed meaning, mapped to their config path. */
export const ENV_ALIASES: Readonly<Record<string, readonly string[]>> = {
  REDIS_URL: ['redis', 'url'],
  ORQ_PREFIX: ['redis', 'prefix'],
  ORQ_LOG_LEVEL: ['logLevel'],
};

/**
 * Merges configuration layers, later layers winning. Objects merge key by key; arrays and
 * scalars replace; an `undefined` value leaves the earlier one in place.
 */
export function mergeConfig(...layers: unknown[]): unknown {
  let result: unknown = undefined;
  for (const layer of layers) {
    if (layer === undefined) continue;
    if (!isPlainObject(layer)) {
      result = layer;
      continue;
    }
    // Copies as it merges, so no layer is mutated or shared with the result.
    const merged: PlainObject = isPlainObject(result) ? { ...result } : {};
    for (const [key, value] of Object.entries(layer)) {
      if (value !== undefined) merged[key] = mergeConfig(merged[key], value);
    }
    result = merged;
  }
  return result;
}

/**
 * Seed 000 keeps the old `maxQualityRetries` working: it stands in for
 * `maxRefinementAttempts` when that is not set; when both are set `maxRefinementAttempts` wins.
 * Works on the raw input, before defaults would make `maxRefinementAttempts` always present.
 */
export function applyLegacyKeys(raw: unknown): unknown {
  if (!isPlainObject(raw) || !isPlainObject(raw.refinement)) return raw;
  const refinement = raw.refinement;
  if (
    refinement.maxQualityRetries === undefined ||
    refinement.maxRefinementAttempts !== undefined
  ) {
    return raw;
  }
  return {
    ...raw,
    refinement: { ...refinement, maxRefinementAttempts: refinement.maxQualityRetries },
  };
}

/** Validates a raw configuration and fills every default; errors name each key by its path. */
export function parseConfig(input: unknown, source?: string): OrqConfig {
  const result = parseForPeople(OrqConfig, applyLegacyKeys(input));
  if (!result.success) throw new ConfigError(source, configIssues(result.error));
  const unworkable = unworkableSettings(result.data);
  if (unworkable.length > 0) throw new ConfigError(source, unworkable);
  return result.data;
}

function configIssues(error: z.ZodError): FieldIssue[] {
  return error.issues.flatMap((issue): FieldIssue[] => {
    if (issue.code !== 'unrecognized_keys') return describeZodIssues(new z.ZodError([issue]));
    const parent = issue.path.map(String);
    // One issue per key, each under its own full path, so every typo is named where it is.
    return issue.keys.map((key) => {
      const path = [...parent, key].join('.');
      return { path, message: `${unknownKeyMessage([...parent, key])}${suggestion(parent, key)}` };
    });
  });
}

// ---------------------------------------------------------------------------------------------
// Walking the schema (to check environment paths and to suggest the key a typo meant)

/** The schema at a config path, or undefined when the path names no key. */
function schemaAt(path: readonly string[]): z.core.$ZodType | undefined {
  let current: z.core.$ZodType = OrqConfig;
  for (const segment of path) {
    const object = unwrapSchema(current);
    if (!(object instanceof z.ZodObject) || !Object.hasOwn(object.shape, segment)) return undefined;
    current = object.shape[segment] as z.core.$ZodType;
  }
  return current;
}

function keysAt(path: readonly string[]): string[] {
  const schema = schemaAt(path);
  const object = schema && unwrapSchema(schema);
  return object instanceof z.ZodObject ? Object.keys(object.shape) : [];
}

function editDistance(a: string, b: string): number {
  let previous = Array.from({ length: b.length + 1 }, (_, i) => i);
  for (let i = 1; i <= a.length; i++) {
    const current = [i];
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      current[j] = Math.min(previous[j]! + 1, current[j - 1]! + 1, previous[j - 1]! + cost);
    }
    previous = current;
  }
  return previous[b.length]!;
}

/** ` (did you mean "refinement.noiseThreshold"?)` when a known key is close to the typo. */
function suggestion(parent: readonly string[], key: string): string {
  let best: { key: string; distance: number } | undefined;
  for (const candidate of keysAt(parent)) {
    const distance = editDistance(key.toLowerCase(), candidate.toLowerCase());
    if (!best || distance < best.distance) best = { key: candidate, distance };
  }
  if (!best || best.distance > Math.max(2, Math.floor(key.length / 4))) return '';
  return ` (did you mean "${[...parent, best.key].join('.')}"?)`;
}

// ---------------------------------------------------------------------------------------------
// Environment

interface EnvOverride {
  variable: string;
  path: string[];
  value: unknown;
}

/** Strings stay strings for string keys, so `ORQ__redis__prefix=123` is the prefix "123". */
function envValue(text: string, target: z.core.$ZodType): unknown {
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    return text;
  }
  const kind = unwrapSchema(target)._zod.def.type;
  if ((kind === 'string' || kind === 'enum') && typeof parsed !== 'string') return text;
  return parsed;
}

function collectEnvOverrides(env: NodeJS.ProcessEnv): EnvOverride[] {
  const overrides: EnvOverride[] = [];
  const issues: FieldIssue[] = [];
  for (const [variable, path] of Object.entries(ENV_ALIASES)) {
    const text = env[variable];
    if (text !== undefined && text !== '')
      overrides.push({ variable, path: [...path], value: text });
  }
  for (const variable of Object.keys(env).sort()) {
    const text = env[variable];
    if (!variable.startsWith(ENV_PREFIX) || text === undefined) continue;
    const path = variable.slice(ENV_PREFIX.length).split(ENV_SEPARATOR);
    const unknownAt = path.findIndex((_, i) => schemaAt(path.slice(0, i + 1)) === undefined);
    if (unknownAt !== -1) {
      const known = path.slice(0, unknownAt);
      const dotted = path.slice(0, unknownAt + 1).join('.');
      const parentSchema = schemaAt(known);
      const isSection = parentSchema && unwrapSchema(parentSchema) instanceof z.ZodObject;
      issues.push({
        path: variable,
        message: isSection
          ? `unknown key "${dotted}"${suggestion(known, path[unknownAt] ?? '')}; ` +
            `use ${ENV_PREFIX}section${ENV_SEPARATOR}key with the exact key names`
          : `"${known.join('.')}" has no keys below it`,
      });
      continue;
    }
    overrides.push({ variable, path, value: envValue(text, schemaAt(path)!) });
  }
  if (issues.length > 0) throw new ConfigError(ENVIRONMENT, issues);
  return overrides;
}

function envLayer(overrides: readonly EnvOverride[]): PlainObject {
  const layer: PlainObject = {};
  for (const { path, value } of overrides) setValueAtPath(layer, path, value);
  return layer;
}

/**
 * Applies `REDIS_URL`, `ORQ_PREFIX`, `ORQ_LOG_LEVEL` and `ORQ__section__key=value` on top of a
 * raw configuration. Segments are the config's exact key names; a value is JSON when it parses
 * as JSON (numbers, booleans, arrays, objects), else a string. An unknown path is a ConfigError
 * naming the variable.
 */
export function applyEnvOverrides(raw: unknown, env: NodeJS.ProcessEnv = process.env): unknown {
  return mergeConfig(raw, envLayer(collectEnvOverrides(env)));
}

// ---------------------------------------------------------------------------------------------
// Files

function syntaxError(file: string, line: number, column: number, message: string): ConfigError {
  return new ConfigError(file, [{ path: `line ${line}, column ${column}`, message }]);
}

function parseJsonText(text: string, file: string): unknown {
  try {
    return JSON.parse(text);
  } catch (error) {
    const message = error instanceof Error ? error.message : String(error);
    const match = /at position (\d+)/.exec(message);
    const position = match ? Number(match[1]) : text.length;
    const before = text.slice(0, position).split('\n');
    const reason = message.replace(/ in JSON at position \d+.*$/s, '');
    return syntaxError(file, before.length, (before.at(-1)?.length ?? 0) + 1, reason);
  }
}

function parseYamlText(text: string, file: string): unknown {
  try {
    // An empty file (or one with only comments) is a valid configuration of defaults.
    return parseYaml(text) ?? {};
  } catch (error) {
    if (error instanceof YAMLParseError) {
      const at = error.linePos?.[0];
      const reason = error.message.split(/ at line \d+/)[0] ?? error.message;
      return syntaxError(file, at?.line ?? 1, at?.col ?? 1, reason);
    }
    throw error;
  }
}

/** Reads a YAML (.yaml/.yml) or JSON (.json) file; other names are tried as JSON, then YAML. */
export function readConfigFile(path: string): unknown {
  let text: string;
  try {
    text = readFileSync(path, 'utf8').replace(/^\uFEFF/, '');
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') {
      throw new OrqError('CONFIG_NOT_FOUND', `Configuration file ${path} not found`, {
        details: { path },
        hint: 'Check the path; `orq config schema` prints every key with its default',
        cause: error,
      });
    }
    throw new ConfigError(path, [
      { path: '(file)', message: `cannot be read: ${unreadableReason(error)}` },
    ]);
  }
  return parseConfigText(text, path);
}

/**
 * The text of a YAML (.yaml/.yml) or JSON (.json) file named `path`; other names are tried as
 * JSON, then YAML. A syntax error is a ConfigError naming the file, line and column.
 */
export function parseConfigText(text: string, path: string): unknown {
  const extension = extname(path).toLowerCase();
  let parsed: unknown;
  if (extension === '.json') parsed = parseJsonText(text, path);
  else if (extension === '.yaml' || extension === '.yml') parsed = parseYamlText(text, path);
  else {
    parsed = parseJsonText(text, path);
    if (parsed instanceof ConfigError) parsed = parseYamlText(text, path);
  }
  if (parsed instanceof ConfigError) throw parsed;
  return parsed;
}

// ---------------------------------------------------------------------------------------------
// Loading

export interface LoadConfigOptions {
  /** A configuration file; without it `ORQ_CONFIG`, then `./orq.config.{yaml,yml,json}`. */
  file?: string;
  /** Environment to read overrides from; `process.env` when omitted. */
  env?: NodeJS.ProcessEnv;
  /** Applied last, over the file and the environment (e.g. CLI flags). */
  overrides?: unknown;
  /** Where to look for `orq.config.*`; the working directory when omitted. */
  cwd?: string;
  /**
   * Also refuse session settings a submit would refuse (unsubmittableSettings), as errors of
   * this configuration: for a check of the file, and a command that submits it unchanged.
   */
  submitChecks?: boolean;
}

/** The file loadConfig would read, or undefined when there is none. */
export function findConfigFile(options: LoadConfigOptions = {}): string | undefined {
  if (options.file) return options.file;
  const fromEnv = (options.env ?? process.env).ORQ_CONFIG;
  if (fromEnv) return fromEnv;
  const cwd = options.cwd ?? process.cwd();
  return DEFAULT_CONFIG_FILES.map((name) => join(cwd, name)).find((path) => existsSync(path));
}

/**
 * The effective configuration: file (or `ORQ_CONFIG`, or `./orq.config.*`), then environment,
 * then `overrides`, merged with later layers winning, validated, defaults filled.
 */
export function loadConfig(options: LoadConfigOptions = {}): OrqConfig {
  const env = options.env ?? process.env;
  const file = findConfigFile(options);
  let fromFile: unknown = {};
  if (file) {
    try {
      fromFile = readConfigFile(file);
    } catch (error) {
      if (!options.file && error instanceof OrqError && error.code === 'CONFIG_NOT_FOUND') {
        throw new OrqError('CONFIG_NOT_FOUND', `Configuration file ${file} not found`, {
          details: { path: file },
          hint: 'ORQ_CONFIG names it; unset ORQ_CONFIG or point it at an existing file',
          cause: error,
        });
      }
      throw error;
    }
    // A file that is not a mapping must be reported as such, not hidden under the overrides.
    if (!isPlainObject(fromFile)) parseConfig(fromFile, file);
  }
  const envOverrides = collectEnvOverrides(env);
  const raw = mergeConfig(fromFile, envLayer(envOverrides), options.overrides);
  try {
    const config = parseConfig(raw);
    const unsubmittable = options.submitChecks ? unsubmittableSettings(config) : [];
    if (unsubmittable.length > 0) throw new ConfigError(undefined, unsubmittable);
    return config;
  } catch (error) {
    if (!(error instanceof ConfigError)) throw error;
    const origin = (path: string) => envOrigin(path, envOverrides, options.overrides);
    const origins = error.issues.map((issue) => origin(issue.path));
    const issues = error.issues.map((issue, i) => {
      // The settings that make the problem with it, where the environment set them.
      const related = (issue.settings ?? []).flatMap((path) => {
        const variable = origin(path);
        return variable ? [`${path} set by ${variable}`] : [];
      });
      const notes = [...(origins[i] ? [`set by ${origins[i]}`] : []), ...related];
      return notes.length > 0
        ? { ...issue, message: `${issue.message} (${notes.join('; ')})` }
        : issue;
    });
    // Bad values only from variables are the environment's, whatever file there is.
    const allFromEnv = origins.length > 0 && origins.every((origin) => origin !== undefined);
    throw new ConfigError(allFromEnv ? ENVIRONMENT : file, issues);
  }
}

/** The variable that set the value at `setting`, unless `overrides` replaced it afterwards. */
function envOrigin(
  setting: string,
  envOverrides: readonly EnvOverride[],
  overrides: unknown,
): string | undefined {
  const origin = envOverrides.findLast(({ path }) => {
    const dotted = path.join('.');
    return setting === dotted || setting.startsWith(`${dotted}.`);
  });
  if (!origin || valueAtPath(overrides, origin.path) !== undefined) return undefined;
  return origin.variable;
}

// ---------------------------------------------------------------------------------------------
// Advice

/** Settings that are valid but probably not what was meant. */
export function configWarnings(config: OrqConfig): string[] {
  const warnings: string[] = [];
  const { refinement } = config;

  if (refinement.noiseThreshold >= refinement.deltaThreshold) {
    warnings.push(
      `refinement.noiseThreshold (${refinement.noiseThreshold}) >= refinement.deltaThreshold ` +
        `(${refinement.deltaThreshold}): every score change that is not noise already counts as ` +
        'stagnation; seed 003 recommends noiseThreshold < deltaThreshold',
    );
  }

  if (refinement.maxQualityRetries !== undefined) {
    warnings.push(
      refinement.maxQualityRetries === refinement.maxRefinementAttempts
        ? 'refinement.maxQualityRetries is the legacy name of refinement.maxRefinementAttempts; rename it'
        : `refinement.maxQualityRetries (${refinement.maxQualityRetries}) is ignored because ` +
            `refinement.maxRefinementAttempts (${refinement.maxRefinementAttempts}) is set`,
    );
  }

  if (refinement.treatTermLossAsStructureBreak && !refinement.enableTermPreservationCheck) {
    warnings.push(
      'refinement.treatTermLossAsStructureBreak has no effect while ' +
        'refinement.enableTermPreservationCheck is false',
    );
  }

  return warnings;
}
