import { Option, type Command } from 'commander';
import { FINISHED_SESSION_STATES, type SessionState } from '../../../shared/domain/session.js';
import { OrqError } from '../../../shared/errors.js';
import { configOption, parseDurationSeconds } from '../options.js';
import { exitCodeFor } from '../run-cli.js';

// Loaded when a command runs: `--help` and a usage error need no client.
const common = () => import('../common.js');

/** delete and prune: what is kept of finished sessions. */
export function registerRetentionCommands(program: Command): void {
  program
    .command('delete')
    .description(
      'Delete finished sessions and everything kept of them (tasks, results, history, usage)',
    )
    .argument('<sessionId...>')
    .option(...configOption)
    .action(async (sessionIds: string[], options: { config?: string }) =>
      (await common()).withSessions(options, async (client) => {
        // Like rm: every id is tried, and the exit code says whether one failed.
        for (const id of sessionIds) {
          try {
            const { state } = await client.delete(id);
            process.stdout.write(`deleted ${id} (${state})\n`);
          } catch (error) {
            if (!(error instanceof OrqError) || error.code === 'REDIS_UNAVAILABLE') throw error;
            process.stderr.write(`orq: ${error.message}\n`);
            process.exitCode = Math.max(Number(process.exitCode ?? 0), exitCodeFor(error));
          }
        }
      }),
    );

  program
    .command('prune')
    .description('Delete the finished sessions idle for longer than a given time')
    .requiredOption(
      '--older-than <duration>',
      'idle (no history entry) for longer than this: 90s, 30m, 12h, 7d, 2w',
      parseDurationSeconds,
    )
    .addOption(
      new Option(
        '--state <state...>',
        'only sessions in these states (default: every finished state)',
      ).choices(FINISHED_SESSION_STATES),
    )
    .option('--dry-run', 'list what would be deleted, delete nothing')
    .option('--json', 'print the report as JSON')
    .option(...configOption)
    .action(
      async (options: {
        config?: string;
        olderThan: number;
        state?: SessionState[];
        dryRun?: boolean;
        json?: boolean;
      }) => {
        const { printJson, withSessions } = await common();
        return withSessions(options, async (client) => {
          const report = await client.prune({
            olderThanSeconds: options.olderThan,
            ...(options.state ? { states: options.state } : {}),
            ...(options.dryRun ? { dryRun: true } : {}),
          });
          if (options.json) {
            printJson(report);
            return;
          }
          const verb = options.dryRun ? 'would delete' : 'deleted';
          for (const id of report.deleted) process.stdout.write(`${verb} ${id}\n`);
          process.stdout.write(
            `${verb} ${report.deleted.length} session${report.deleted.length === 1 ? '' : 's'}` +
              (report.unindexed > 0
                ? `; ${report.unindexed} index entr${report.unindexed === 1 ? 'y' : 'ies'} of sessions already gone ${options.dryRun ? 'would be' : 'were'} dropped`
                : '') +
              '\n',
          );
        });
      },
    );
}
