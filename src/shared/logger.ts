import { pino, type Logger, type LoggerOptions } from 'pino';

export type { Logger };

/** Ids every log line of a consumer carries (STYLE.md: session and task ids on every line). */
export interface LogBindings {
  role?: string;
  sessionId?: string;
  taskId?: string;
  jobId?: string;
  [key: string]: unknown;
}

export function createLogger(options: LoggerOptions & { level?: string } = {}): Logger {
  return pino({
    name: 'orq',
    level: options.level ?? process.env.ORQ_LOG_LEVEL ?? 'info',
    base: { pid: process.pid },
    timestamp: pino.stdTimeFunctions.isoTime,
    ...options,
  });
}

/** A logger that writes nothing, for library users who pass none and for tests. */
export const silentLogger: Logger = pino({ level: 'silent' });
