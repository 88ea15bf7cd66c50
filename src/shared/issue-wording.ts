import type { z } from 'zod';

// How orq words zod's issues for a person (errors.ts's parseForPeople applies it): what a field
// expects and what it got, in words, for the library, the config loader, the CLI and the API.

const KINDS: Partial<Record<string, string>> = {
  string: 'a string',
  number: 'a number',
  int: 'a whole number',
  bigint: 'a whole number',
  boolean: 'true or false',
  object: 'an object',
  array: 'an array',
  function: 'a function',
  date: 'a date',
  null: 'null',
};

/** What a value is, for `got …`: NaN, `"abc"` (cut at 40 characters), an array, nothing. */
function describeInput(input: unknown): string {
  if (input === undefined) return 'nothing';
  if (input === null) return 'null';
  if (typeof input === 'number') return Number.isNaN(input) ? 'NaN' : String(input);
  if (typeof input === 'string')
    return JSON.stringify(input.length > 40 ? `${input.slice(0, 40)}…` : input);
  if (typeof input === 'boolean') return String(input);
  if (Array.isArray(input)) return 'an array';
  return KINDS[typeof input] ?? typeof input;
}

const amount = (n: number | bigint): string =>
  typeof n === 'bigint' ? n.toString() : n.toLocaleString('en-US');

const UNITS: Partial<Record<string, readonly [string, string]>> = {
  string: ['character', 'characters'],
  array: ['item', 'items'],
};

/** `100,000 characters`, `1 item`, or the bare number for a number's bound. */
function counted(n: number | bigint, origin: string | undefined): string {
  const units = UNITS[origin ?? ''];
  if (!units) return amount(n);
  return `${amount(n)} ${Number(n) === 1 ? units[0] : units[1]}`;
}

/** `at most 100,000 characters`, `at least 1`, `below 2`: a too_big or too_small issue's bound. */
function bound(issue: z.core.$ZodRawIssue, most: boolean): string | undefined {
  const { origin, inclusive } = issue as { origin?: string; inclusive?: boolean };
  const limit = (issue as { maximum?: number | bigint; minimum?: number | bigint })[
    most ? 'maximum' : 'minimum'
  ];
  if (limit === undefined) return undefined;
  const exclusive = inclusive === false;
  const word = most ? (exclusive ? 'below' : 'at most') : exclusive ? 'above' : 'at least';
  return `${word} ${counted(limit, origin)}`;
}

function size(input: unknown): string {
  if (typeof input === 'string') return counted(input.length, 'string');
  if (Array.isArray(input)) return counted(input.length, 'array');
  return describeInput(input);
}

/**
 * zod's messages for the common issues, reworded for a person: what is expected and what was
 * given (`expected a number, got NaN`, `at most 100,000 characters, got 100,001 characters`),
 * rather than zod's `Invalid input: expected number, received NaN`. A schema's own message wins
 * over these; other issues keep zod's.
 */
export function readableIssueMessage(issue: z.core.$ZodRawIssue): string | undefined {
  switch (issue.code) {
    case 'invalid_type': {
      const expected = KINDS[String(issue.expected)] ?? String(issue.expected);
      return `expected ${expected}, got ${describeInput(issue.input)}`;
    }
    case 'too_big':
    case 'too_small': {
      const limit = bound(issue, issue.code === 'too_big');
      return limit && `${limit}, got ${size(issue.input)}`;
    }
    case 'invalid_value': {
      const values = (issue.values as readonly unknown[]).map((v) => JSON.stringify(v));
      const expected = values.length === 1 ? values[0] : `one of ${values.join(', ')}`;
      return `expected ${expected}, got ${describeInput(issue.input)}`;
    }
    default:
      return undefined;
  }
}
