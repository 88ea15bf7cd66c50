import type { z } from 'zod';
import { readableIssueMessage } from './issue-wording.js';

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
  /** A model call must wait for its provider's shared quota (issue 33): its job is handed back. */
  | 'QUOTA_WAIT'
  /** A work job must wait for a slot of its tenant's cap (issue 33): it is handed back. */
  | 'TENANT_WAIT'
  /** A model call's reservation fits its budget only once calls in flight settle: handed back. */
  | 'BUDGET_WAIT'
  /** The caller may not do this here (a session setting the HTTP API does not let it set). */
  | 'FORBIDDEN'
  /** The caller holds too many of something at once (event streams on one server). */
  | 'TOO_MANY_REQUESTS'
  /** A job's delivery lost its lock (its pod paused or cut off past it): it stops (issue 35). */
  | 'DELIVERY_LOST'
  /** An answer came for a wait for a person that has ended (answered, timed out, cancelled). */
  | 'WAIT_ENDED'
  /** The coordinator failed to apply an answer on every try: the wait is still open. */
  | 'ANSWER_NOT_APPLIED';

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

/**
 * A job must wait longer than it should sleep holding its lock (a provider's quota, its tenant's
 * cap, room in its session's budget): the worker hands it back to its queue as delayed until `retryAt`, spending no attempt,
 * with `activity` as its progress (registry.ts).
 */
export class MustWaitError extends OrqError {
  constructor(
    code: 'QUOTA_WAIT' | 'TENANT_WAIT' | 'BUDGET_WAIT',
    /** What the job waits for, shown as its progress: `waiting for quota (<limit>)`. */
    readonly activity: string,
    readonly waitMs: number,
    message: string,
    options: OrqErrorOptions = {},
  ) {
    super(code, message, options);
    this.name = 'MustWaitError';
  }

  /** When the job should run again: the wait, and jitter of up to a fifth (at most 1 s). */
  retryAt(now: number = Date.now()): number {
    return now + this.waitMs + Math.round(Math.random() * Math.min(1_000, this.waitMs / 5));
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

/** `unknown key "prefx" at the top level`, or `unknown key "refinement.fooBar"` below it. */
export function unknownKeyMessage(path: readonly string[]): string {
  return `unknown key "${path.join('.')}"${path.length === 1 ? ' at the top level' : ''}`;
}

/**
 * One issue as a sentence: `path: message`, or the message alone when it names its field
 * already (an unknown key) or the issue is about the whole input, as `(root): …` told nobody.
 */
export function issueText(issue: FieldIssue): string {
  if (issue.path === '(root)' || issue.path === '' || issue.message.includes(`"${issue.path}"`))
    return issue.message;
  return `${issue.path}: ${issue.message}`;
}

/** Turns zod issues into `path: message` pairs a person can act on, one per unknown key. */
export function describeZodIssues(error: z.ZodError, pathPrefix = ''): FieldIssue[] {
  return error.issues.flatMap((issue): FieldIssue[] => {
    const segments = [pathPrefix, ...issue.path.map(String)].filter((s) => s !== '');
    if (issue.code === 'unrecognized_keys') {
      return issue.keys.map((key) => ({
        path: [...segments, key].join('.'),
        message: unknownKeyMessage([...segments, key]),
      }));
    }
    return [{ path: segments.join('.') || '(root)', message: issue.message }];
  });
}

/** safeParse with orq's wording of the issues (readableIssueMessage): every caller's one place. */
export function parseForPeople<T extends z.ZodType>(
  schema: T,
  input: unknown,
): z.ZodSafeParseResult<z.infer<T>> {
  return schema.safeParse(input, { error: readableIssueMessage }) as z.ZodSafeParseResult<
    z.infer<T>
  >;
}

/** A payload, request or file failed its zod schema. */
export class ValidationError extends OrqError {
  readonly issues: FieldIssue[];

  constructor(what: string, issues: FieldIssue[], options: OrqErrorOptions = {}) {
    super('VALIDATION_FAILED', `Invalid ${what}: ${issues.map(issueText).join('; ')}`, options);
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
    const list = issues.map(issueText).join('; ');
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
  const result = parseForPeople(schema, input);
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

/**
 * An answer to a wait for a person that is no longer open (issue 48): answered already (by this
 * request's twin or by someone else), timed out, cancelled, or superseded by a later plan's.
 */
export class WaitEndedError extends OrqError {
  constructor(sessionId: string, waitId: string | undefined, why: string, current?: string) {
    const what = waitId ? `the wait ${waitId} of session ${sessionId}` : `session ${sessionId}`;
    super('WAIT_ENDED', `${what} waits for nobody now: ${why}`, {
      hint: current
        ? `The session now waits on ${current}: look at it (orq status ${sessionId}) and answer that one.`
        : `Nothing of it is waiting for you: orq status ${sessionId} shows where it is.`,
      details: {
        sessionId,
        ...(waitId ? { waitId } : {}),
        ...(current ? { currentWaitId: current } : {}),
      },
    });
    this.name = 'WaitEndedError';
  }
}
