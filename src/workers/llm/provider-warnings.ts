import { format } from 'node:util';
import type { Logger } from '../../shared/logger.js';

/**
 * Warnings about the model calls that are not failures: what a model's SDK says (a deprecated
 * model) and what orq notices in a reply (a prompt the server cut). Each is logged once per
 * process, not on every call, through the logger a pod routes them to (routeProviderWarnings);
 * before that, or in a library user's process without one, on stderr.
 */

let sink: Logger | undefined;
/** Warnings already given, by key. */
const given = new Set<string>();
const MAX_GIVEN = 200;

export interface WarningContext {
  role: string;
  model: string;
  [key: string]: unknown;
}

/** Sends the provider warnings to `logger` from now on, for the rest of the process. */
export function routeProviderWarnings(logger: Logger): void {
  sink = logger;
}

/** Logs `message` unless a warning of `key` was given already. */
export function warnOnce(key: string, context: WarningContext, message: string): void {
  if (given.has(key)) return;
  if (given.size < MAX_GIVEN) given.add(key);
  if (sink) sink.warn(context, message);
  else process.stderr.write(`orq: warning: ${message}\n`);
}

/**
 * Runs `send` (one SDK request) with console.warn caught. The Anthropic SDK writes a deprecated
 * model's end of life with console.warn on every request, plain text between pino's JSON lines.
 * It does so synchronously as the request starts, and nothing else runs meanwhile, so only the
 * SDK's own warnings are caught; each goes to warnOnce.
 */
export function withSdkWarnings<T>(sdk: string, context: WarningContext, send: () => T): T {
  const original = console.warn;
  console.warn = (...args: unknown[]) => {
    const message = format(...args);
    warnOnce(`${sdk}:${message}`, context, `${sdk} SDK: ${message}`);
  };
  try {
    return send();
  } finally {
    console.warn = original;
  }
}
