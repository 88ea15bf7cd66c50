import type { z } from 'zod';

export type OrqErrorCode =
  | 'CONFIG_INVALID'
  | 'CONFIG_NOT_FOUND'
  | 'VALIDATION_FAILED'
  | 'NOT_FOUND'
  | 'CONFLICT'
  | 'REDIS_UNAVAILABLE'
  | 'REDIS_NOT_INSTALLED'
  | 'REDIS_START_FAILED'
  | 'LLM_OUTPUT_INVALID'
  | 'LLM_CALL_FAILED'
  | 'SCENARIO_INVALID'
  | 'INVALID_STATE'
  /** A wait ran out of time before the session got where it was waited for (client.wait). */
  | 'TIMEOUT'
  /** A server (HTTP API, a pod's metrics and probes) could not listen on its address. */
  | 'LISTEN_FAILED'
  /** A model call could not reserve its estimate within the session's budget (issue 4). */
  | 'BUDGET_EXHAUSTED'
  /** The caller may not do this here (a session setting the HTTP API does not let it set). */
  | 'FORBIDDEN';

export interface OrqErrorOptions {
  /** What the user can do about it. */
  hint?: string;
  /** The ids involved (sessionId, taskId, jobId, key, ...). */
  details?: Record<string, unknown>;
  cause?: unknown;
}

/** Base of every error orq throws on purpose: a stable code, the ids involved and a hint. */
export class OrqError extends Error {
  readonly code: OrqErrorCode;
  /** What happened, without the hint (`message` reads both, for a terminal's one line). */
  readonly summary: string;
  readonly hint: string | undefined;
  readonly details: Record<string, unknown>;

  constructor(code: OrqErrorCode, message: string, options: OrqErrorOptions = {}) {
    super(options.hint ? `${message}. ${options.hint}` : message, { cause: options.cause });
    this.name = 'OrqError';
    this.code = code;
    this.summary = message;
    this.hint = options.hint;
    this.details = options.details ?? {};
  }

  toJSON(): Record<string, unknown> {
    return { code: this.code, message: this.message, hint: this.hint, details: this.details };
  }
}

export interface FieldIssue {
  /** Dotted path of the offending field, e.g. `refinement.noiseThreshold`. */
  path: string;
  message: string;
  /**
   * Other settings that together with `path` make the problem (e.g. the `budget.maxUsd` that
   * needs the missing price), so a caller can say where each of them was set.
   */
  settings?: string[];
}

/** Turns zod issues into `path: message` pairs a person can act on. */
export function describeZodIssues(error: z.ZodError, pathPrefix = ''): FieldIssue[] {
  return error.issues.map((issue) => {
    const segments = [pathPrefix, ...issue.path.map(String)].filter((s) => s !== '');
    let message = issue.message;
    if (issue.code === 'unrecognized_keys') {
      const keys = issue.keys.map((k) => [...segments, k].join('.'));
      message = `unknown key${keys.length > 1 ? 's' : ''} ${keys.map((k) => `"${k}"`).join(', ')}`;
    }
    return { path: segments.join('.') || '(root)', message };
  });
}

/** A payload, request or file failed its zod schema. */
export class ValidationError extends OrqError {
  readonly issues: FieldIssue[];

  constructor(what: string, issues: FieldIssue[], options: OrqErrorOptions = {}) {
    const list = issues.map((i) => `${i.path}: ${i.message}`).join('; ');
    super('VALIDATION_FAILED', `Invalid ${what}: ${list}`, options);
    this.name = 'ValidationError';
    this.issues = issues;
  }

  static fromZod(what: string, error: z.ZodError, options: OrqErrorOptions = {}): ValidationError {
    return new ValidationError(what, describeZodIssues(error), options);
  }
}

/** The configuration file or environment holds an unknown key or an out-of-range value. */
export class ConfigError extends OrqError {
  readonly issues: FieldIssue[];

  /** `source`: where the configuration came from (a file, `the environment`), when known. */
  constructor(source: string | undefined, issues: FieldIssue[]) {
    const list = issues.map((i) => `${i.path}: ${i.message}`).join('; ');
    super('CONFIG_INVALID', `Invalid configuration${source ? ` in ${source}` : ''}: ${list}`, {
      hint: 'Run `orq config schema` for every key, its type and default.',
      ...(source ? { details: { source } } : {}),
    });
    this.name = 'ConfigError';
    this.issues = issues;
  }
}

export class NotFoundError extends OrqError {
  constructor(what: string, id: string, hint?: string) {
    super('NOT_FOUND', `${what} ${id} not found`, { details: { id }, hint });
    this.name = 'NotFoundError';
  }
}

/** Parses with a schema, throwing a ValidationError that names the fields. */
export function parseOrThrow<T extends z.ZodType>(
  schema: T,
  input: unknown,
  what: string,
): z.infer<T> {
  const result = schema.safeParse(input);
  if (!result.success) throw ValidationError.fromZod(what, result.error);
  return result.data;
}

/** Why a file could not be read, in words for an error message (a missing file, a directory). */
export function unreadableReason(error: unknown): string {
  const { code, message } = error as NodeJS.ErrnoException;
  if (code === 'ENOENT') return 'no such file';
  if (code === 'EISDIR') return 'it is a directory';
  if (code === 'EACCES') return 'permission denied';
  if (code === 'ENOTDIR') return 'a part of the path is a file, not a directory';
  return message;
}
