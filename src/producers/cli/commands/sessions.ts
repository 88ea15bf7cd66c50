import { Option, type Command } from 'commander';
import type {
  CancelOptions,
  HistoryOptions,
  ResumeOptions,
  StatusOptions,
  SubmitOptions,
  WatchOptions,
} from './session-actions.js';
import {
  configOption,
  parseIntIn,
  parsePositiveInt,
  parsePositiveNumber,
  parseTaskIds,
  priorityOption,
  readInstruction,
  tenantOption,
} from '../options.js';

// What the commands do loads when one runs: `--help`, `--version` and a usage error load no client.
const actions = () => import('./session-actions.js');

/** submit, status, watch, resume, cancel, history: the commands that talk to running roles. */
export function registerSessionCommands(program: Command): void {
  program
    .command('submit')
    .description('Submit an instruction to running roles; prints the session id')
    .argument('<instruction>', 'what you want done; - reads it from stdin', readInstruction)
    .option(...configOption)
    .option(
      '--scenario <file>',
      'script the builtin provider with a scenario file (the roles read it at this path)',
    )
    .option(
      '--session-config <json|file>',
      'per-session overrides, inline JSON (e.g. {"refinement":{"noiseThreshold":4}}) or a YAML/JSON file; relative paths in them are resolved against this directory',
    )
    .option('--idempotency-key <key>', 'the same key twice gives the same session')
    .option(...tenantOption)
    .option(...priorityOption)
    .option('--json', 'print the session as JSON')
    .action(async (instruction: string, options: SubmitOptions) =>
      (await actions()).submit(instruction, options),
    );

  program
    .command('status')
    .alias('list')
    .description('Show a session and a table of its tasks, or list recent sessions')
    .argument('[sessionId]')
    .option(...configOption)
    .option('--limit <n>', 'sessions to list (at most 500)', parseIntIn(1, 500), 20)
    .option('--json', 'print JSON (the session with its tasks, or the list of sessions)')
    .action(async (sessionId: string | undefined, options: StatusOptions) =>
      (await actions()).status(sessionId, options),
    );

  program
    .command('watch')
    .description(
      'Follow a session until it finishes or blocks: a live view in a terminal, plain lines otherwise',
    )
    .argument('<sessionId>')
    .option(...configOption)
    .option('--json', 'print each history entry as a JSON line')
    .option(
      '--run',
      'run every role in this process while following (a session an interrupted `orq run` left)',
    )
    .action(async (sessionId: string, options: WatchOptions) =>
      (await actions()).watch(sessionId, options),
    );

  program
    .command('resume')
    .description(
      'Resume a blocked session (retry its blocked tasks, skip them, or continue with a note), or one out of budget with --max-tokens/--max-usd',
    )
    .argument('<sessionId>')
    .option(...configOption)
    .addOption(
      new Option('--skip', 'skip the blocked tasks so their dependents go on').conflicts('note'),
    )
    .option('--note <text>', 'continue the blocked tasks with this note as feedback')
    .option(
      '--task <id>',
      'only this task (default: every blocked task); repeat it or separate ids with commas for more',
      parseTaskIds,
    )
    .option(
      '--max-tokens <n>',
      'for a BUDGET_EXHAUSTED session: the higher token limit it goes on with',
      parsePositiveInt,
    )
    .option(
      '--max-usd <usd>',
      'for a BUDGET_EXHAUSTED session: the higher USD limit it goes on with',
      parsePositiveNumber,
    )
    .option(
      '--run',
      'run every role in this process until the session ends, with progress (after `orq run`)',
    )
    .option('--json', 'with --run: print the final session with its tasks as JSON on stdout')
    .action(async (sessionId: string, options: ResumeOptions) =>
      (await actions()).resume(sessionId, options),
    );

  program
    .command('cancel')
    .description('Cancel a session: unfinished tasks become CANCELLED')
    .argument('<sessionId>')
    .option(...configOption)
    .option('--reason <text>', 'recorded in the history', 'cancelled by user')
    .action(async (sessionId: string, options: CancelOptions) =>
      (await actions()).cancel(sessionId, options),
    );

  program
    .command('history')
    .description("Print a session's history: every plan, judgement, decision and state change")
    .argument('<sessionId>')
    .option(...configOption)
    .option('--jsonl', 'one JSON object per line (seed 004 line format)')
    .addOption(new Option('--json', 'one JSON array of the entries').conflicts('jsonl'))
    .action(async (sessionId: string, options: HistoryOptions) =>
      (await actions()).history(sessionId, options),
    );
}
