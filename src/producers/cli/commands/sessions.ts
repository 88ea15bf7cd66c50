import { readFileSync } from 'node:fs';
import type { Command } from 'commander';
import { OrqError } from '../../../shared/errors.js';
import { printJson, withClient } from '../common.js';
import { formatHistoryEntry, formatSessionTable } from '../format.js';
import { ExitCode } from '../run-cli.js';

const configOption = ['-c, --config <file>', 'configuration file (YAML or JSON)'] as const;

function sessionOverrides(value: string | undefined): Record<string, unknown> | undefined {
  if (!value) return undefined;
  const text = value.trim().startsWith('{') ? value : readFileSync(value, 'utf8');
  try {
    return JSON.parse(text) as Record<string, unknown>;
  } catch (error) {
    throw new OrqError(
      'VALIDATION_FAILED',
      `--session-config is not valid JSON: ${(error as Error).message}`,
    );
  }
}

/** submit, status, watch, resume, cancel, history: the commands that talk to running roles. */
export function registerSessionCommands(program: Command): void {
  program
    .command('submit')
    .description('Submit an instruction to running roles; prints the session id')
    .argument('<instruction>')
    .option(...configOption)
    .option(
      '--session-config <json|file>',
      'per-session overrides, e.g. {"refinement":{"noiseThreshold":4}}',
    )
    .option('--idempotency-key <key>', 'the same key twice gives the same session')
    .option('--json', 'print the session as JSON')
    .action(
      async (
        instruction: string,
        options: {
          config?: string;
          sessionConfig?: string;
          idempotencyKey?: string;
          json?: boolean;
        },
      ) =>
        withClient(options, async (client) => {
          const overrides = sessionOverrides(options.sessionConfig);
          const session = await client.submit({
            instruction,
            ...(overrides ? { config: overrides } : {}),
            ...(options.idempotencyKey ? { idempotencyKey: options.idempotencyKey } : {}),
          });
          if (options.json) printJson(session);
          else process.stdout.write(`${session.id}\n`);
        }),
    );

  program
    .command('status')
    .description('Show a session and its tasks, or list recent sessions')
    .argument('[sessionId]')
    .option(...configOption)
    .option('--limit <n>', 'sessions to list', '20')
    .option('--json', 'print JSON')
    .action(
      async (
        sessionId: string | undefined,
        options: { config?: string; limit: string; json?: boolean },
      ) =>
        withClient(options, async (client) => {
          if (!sessionId) {
            const sessions = await client.list({ limit: Number(options.limit) || 20 });
            if (options.json) return printJson(sessions);
            for (const s of sessions) {
              process.stdout.write(
                `${s.id}  ${s.state.padEnd(9)}  ${s.createdAt}  ${s.instruction.slice(0, 60)}\n`,
              );
            }
            return;
          }
          const view = await client.get(sessionId);
          if (options.json) printJson(view);
          else process.stdout.write(`${formatSessionTable(view)}\n`);
        }),
    );

  program
    .command('watch')
    .description('Follow a session until it finishes or blocks')
    .argument('<sessionId>')
    .option(...configOption)
    .option('--json', 'print each history entry as a JSON line')
    .action(async (sessionId: string, options: { config?: string; json?: boolean }) =>
      withClient(options, async (client) => {
        for await (const { entry } of client.watch(sessionId, { until: 'settled' })) {
          process.stdout.write(
            `${options.json ? JSON.stringify(entry) : formatHistoryEntry(entry)}\n`,
          );
        }
        const { session } = await client.get(sessionId);
        process.exitCode = session.state === 'COMPLETED' ? ExitCode.OK : ExitCode.NOT_COMPLETED;
      }),
    );

  program
    .command('resume')
    .description(
      'Resume a blocked session: retry its blocked tasks, skip them, or continue with a note',
    )
    .argument('<sessionId>')
    .option(...configOption)
    .option('--skip', 'skip the blocked tasks so their dependents go on')
    .option('--note <text>', 'continue the blocked tasks with this note as feedback')
    .option('--task <id...>', 'only these tasks (default: every blocked task)')
    .action(
      async (
        sessionId: string,
        options: { config?: string; skip?: boolean; note?: string; task?: string[] },
      ) =>
        withClient(options, async (client) => {
          if (options.skip && options.note) {
            throw new OrqError('VALIDATION_FAILED', '--skip and --note exclude each other');
          }
          const mode = options.skip ? 'skip' : options.note ? 'continue' : 'retry';
          await client.resume(sessionId, {
            mode,
            ...(options.task ? { taskIds: options.task } : {}),
            ...(options.note ? { note: options.note } : {}),
          });
          process.stdout.write(`resume (${mode}) requested for ${sessionId}\n`);
        }),
    );

  program
    .command('cancel')
    .description('Cancel a session: unfinished tasks become CANCELLED')
    .argument('<sessionId>')
    .option(...configOption)
    .option('--reason <text>', 'recorded in the history', 'cancelled by user')
    .action(async (sessionId: string, options: { config?: string; reason: string }) =>
      withClient(options, async (client) => {
        await client.cancel(sessionId, options.reason);
        process.stdout.write(`cancel requested for ${sessionId}\n`);
      }),
    );

  program
    .command('history')
    .description("Print a session's history: every plan, judgement, decision and state change")
    .argument('<sessionId>')
    .option(...configOption)
    .option('--jsonl', 'one JSON object per line (seed 004 line format)')
    .action(async (sessionId: string, options: { config?: string; jsonl?: boolean }) =>
      withClient(options, async (client) => {
        if (options.jsonl) {
          process.stdout.write(await client.historyJsonl(sessionId));
          return;
        }
        for (const { entry } of await client.history(sessionId)) {
          process.stdout.write(`${formatHistoryEntry(entry)}\n`);
        }
      }),
    );
}
