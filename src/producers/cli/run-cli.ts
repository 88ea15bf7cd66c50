import type { Command } from 'commander';
import { OrqError } from '../../shared/errors.js';

/** Exit codes of the CLI (documented in the README). */
export const ExitCode = {
  OK: 0,
  /** The session ended but not COMPLETED (failed, blocked, cancelled), or a check found problems. */
  NOT_COMPLETED: 1,
  /** Bad usage or invalid input (config, request). */
  USAGE: 2,
  /** Redis unreachable or another environment problem. */
  ENVIRONMENT: 3,
} as const;

/** Runs the program and turns typed errors into one readable line and an exit code. */
export async function runCli(program: Command, argv: string[]): Promise<void> {
  try {
    await program.parseAsync(argv);
  } catch (error) {
    if (error instanceof OrqError) {
      process.stderr.write(`orq: ${error.message}\n`);
      process.exitCode =
        error.code === 'REDIS_UNAVAILABLE' ||
        error.code === 'REDIS_NOT_INSTALLED' ||
        error.code === 'REDIS_START_FAILED'
          ? ExitCode.ENVIRONMENT
          : error.code === 'CONFIG_INVALID' ||
              error.code === 'VALIDATION_FAILED' ||
              error.code === 'CONFIG_NOT_FOUND'
            ? ExitCode.USAGE
            : ExitCode.NOT_COMPLETED;
      return;
    }
    throw error;
  }
}
