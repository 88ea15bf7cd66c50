import { pino, type DestinationStream, type Logger, type LoggerOptions } from 'pino';
import { z } from 'zod';

export type { Logger };

/** Ids every log line of a consumer carries (STYLE.md: session and task ids on every line). */
export interface LogBindings {
  role?: string;
  sessionId?: string;
  taskId?: string;
  jobId?: string;
  [key: string]: unknown;
}

/**
 * JSON lines through pino; `fd: 2` keeps stdout free for a command's own output, and
 * `destination` (which wins over `fd`) takes each line instead (the CLI's live view).
 */
export function createLogger(
  options: LoggerOptions & { level?: string; fd?: 1 | 2; destination?: DestinationStream } = {},
): Logger {
  const { fd = 1, destination, ...rest } = options;
  return pino(
    {
      name: 'orq',
      level: options.level ?? process.env.ORQ_LOG_LEVEL ?? 'info',
      base: { pid: process.pid },
      timestamp: pino.stdTimeFunctions.isoTime,
      ...rest,
    },
    destination ?? pino.destination({ fd, sync: fd === 2 }),
  );
}

/** A logger that writes nothing, for library users who pass none and for tests. */
export const silentLogger: Logger = pino({ level: 'silent' });

/**
 * A `logger` option (createClient, startRoles): a pino logger, or anything with its level
 * methods and `child`, which orq calls on it.
 */
export const LoggerOption = z.custom<Logger>(
  (value) =>
    typeof value === 'object' &&
    value !== null &&
    ['child', 'info', 'warn', 'error'].every(
      (method) => typeof (value as Record<string, unknown>)[method] === 'function',
    ),
  { error: 'expected a pino logger (with child, info, warn and error methods)' },
);
