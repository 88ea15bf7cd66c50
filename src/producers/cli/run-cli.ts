import { CommanderError, type Command } from 'commander';
import { OrqError, type OrqErrorCode } from '../../shared/errors.js';

/**
 * Exit codes of the CLI (the table in docs/cli.md says the same). Scripts can tell "the session did
 * not complete / the session is not there" (1) from "you called me wrong" (2) from "Redis is
 * not there" (3).
 */
export const ExitCode = {
  OK: 0,
  /**
   * The command was well formed but the session did not give what was asked: it ended other than
   * COMPLETED (FAILED, BLOCKED, CANCELLED, BUDGET_EXHAUSTED), it does not exist (NOT_FOUND), it
   * is in a state the command cannot act on (INVALID_STATE), or a check found problems.
   */
  NOT_COMPLETED: 1,
  /** Bad usage: unknown option or command, missing or invalid argument, invalid config or request. */
  USAGE: 2,
  /** Redis unreachable, redis-server not installed, a port taken, or another environment problem. */
  ENVIRONMENT: 3,
  /** Interrupted by Ctrl-C (SIGINT) while following a session. */
  INTERRUPTED: 130,
} as const;
export type ExitCode = (typeof ExitCode)[keyof typeof ExitCode];

/** Each typed error's exit code; a code missing here exits 1. */
const EXIT_CODE_BY_ERROR: Partial<Record<OrqErrorCode, ExitCode>> = {
  REDIS_UNAVAILABLE: ExitCode.ENVIRONMENT,
  REDIS_NOT_INSTALLED: ExitCode.ENVIRONMENT,
  REDIS_START_FAILED: ExitCode.ENVIRONMENT,
  LISTEN_FAILED: ExitCode.ENVIRONMENT,
  CONFIG_INVALID: ExitCode.USAGE,
  CONFIG_NOT_FOUND: ExitCode.USAGE,
  VALIDATION_FAILED: ExitCode.USAGE,
  SCENARIO_INVALID: ExitCode.USAGE,
  NOT_FOUND: ExitCode.NOT_COMPLETED,
  INVALID_STATE: ExitCode.NOT_COMPLETED,
  TIMEOUT: ExitCode.NOT_COMPLETED,
  CONFLICT: ExitCode.NOT_COMPLETED,
  WAIT_ENDED: ExitCode.NOT_COMPLETED,
};

export function exitCodeFor(error: OrqError): ExitCode {
  return EXIT_CODE_BY_ERROR[error.code] ?? ExitCode.NOT_COMPLETED;
}

function* commandTree(command: Command): Generator<Command> {
  yield command;
  for (const sub of command.commands) yield* commandTree(sub);
}

/** An unknown command without commander's "Did you mean" gets the way to the list of them. */
function withHelpHint(message: string): string {
  if (!message.startsWith('unknown command') || message.includes('Did you mean')) return message;
  return message.replace(/\n?$/, '. Run `orq --help` to see the commands.\n');
}

/**
 * Commander words a refused option value as `option '--limit <n>' argument 'abc' is invalid.
 * expected …`: it names the option, as `--limit: expected a whole number from 1 to 500, got
 * "abc"` does in fewer words (our parsers' messages say the value given).
 */
function withOptionNamed(message: string): string {
  const match = /^option '([^']*)' argument '.*' is invalid\. (.*)$/s.exec(message);
  if (!match) return message;
  const [, flags = '', reason = ''] = match;
  const name = /--[\w-]+/.exec(flags)?.[0] ?? flags;
  return `${name}: ${reason}`;
}

/**
 * Commander's own errors (unknown option, missing argument) become exit code 2 and read like
 * orq's: `orq: <message>` on stderr. Applied to every command, as subcommands were created before.
 */
function routeCommanderErrors(program: Command): void {
  for (const command of commandTree(program)) {
    command.exitOverride();
    command.configureOutput({
      outputError: (message, write) =>
        write(`orq: ${withOptionNamed(withHelpHint(message.replace(/^error: /, '')))}`),
    });
  }
}

/** Runs the program and turns typed errors into one readable line and an exit code. */
export async function runCli(program: Command, argv: string[]): Promise<void> {
  routeCommanderErrors(program);
  try {
    await program.parseAsync(argv);
  } catch (error) {
    if (error instanceof CommanderError) {
      // Help and --version exit 0; commander has already printed its message.
      process.exitCode = error.exitCode === 0 ? ExitCode.OK : ExitCode.USAGE;
      return;
    }
    if (error instanceof OrqError) {
      process.stderr.write(`orq: ${error.message}\n`);
      process.exitCode = exitCodeFor(error);
      return;
    }
    throw error;
  }
}
