import ms from 'ms';
import { readFileSync } from 'node:fs';
import { InvalidArgumentError } from 'commander';
import { z } from 'zod';
import { TaskId } from '../../shared/domain/task.js';
import { OrqError, parseOrThrow, unreadableReason } from '../../shared/errors.js';
import { Instruction } from '../instruction.js';

// The command line's own parsers: commander runs them before any action, so a bad argument is
// refused without loading what the commands run (BullMQ, the client, the roles).

/** `-c, --config`: every command that reads a configuration file takes it alike. */
export const configOption = ['-c, --config <file>', 'configuration file (YAML or JSON)'] as const;

/** Shaped as the submit request, so a refusal names the field as a submit's does. */
const InstructionArgument = z.strictObject({ instruction: Instruction });

/**
 * The instruction argument: `-` reads it from stdin (a long one, or one another program writes),
 * as `cat -` does. Checked as a submit checks it, before any Redis starts for the command.
 */
export function readInstruction(argument: string): string {
  const instruction = argument === '-' ? readStdin() : argument;
  parseOrThrow(InstructionArgument, { instruction }, 'submit request');
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
/** The builtin model's simulated latency (`--latency`, for benchmarks): up to ten minutes. */
export const parseLatency = parseIntIn(0, 600_000);
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

/** `--tenant` and `--priority` of the commands that submit a session (fairness, issue 33). */
export const tenantOption = [
  '--tenant <name>',
  'whose session this is: workers are shared fairly among tenants (default: default)',
] as const;
export const priorityOption = [
  '--priority <1-9>',
  'higher is served first (default 5)',
  parseIntIn(1, 9),
] as const;

/** The session's tenant and priority as the command line gave them, for client.submit. */
export function fairnessOptions(options: { tenant?: string; priority?: number }): {
  tenant?: string;
  priority?: number;
} {
  return {
    ...(options.tenant !== undefined ? { tenant: options.tenant } : {}),
    ...(options.priority !== undefined ? { priority: options.priority } : {}),
  };
}
