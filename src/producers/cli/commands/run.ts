import { Option, type Command } from 'commander';
import { createLogger } from '../../../shared/logger.js';
import type { Role } from '../../../shared/queues.js';
import { startRoles } from '../../../workers/registry.js';
import { createClient } from '../../client.js';
import { cliConfig, parsePositiveInt, printJson } from '../common.js';
import { followMode, followSession, reportOutcome, stopOnSignals } from '../follow.js';
import { formatSessionTable } from '../format.js';
import { redisForCli } from '../redis-for-cli.js';
import { ExitCode } from '../run-cli.js';

const ALL_ROLES: Role[] = ['planner', 'judge', 'worker', 'replanner', 'coordinator'];

interface RunOptions {
  config?: string;
  scenario?: string;
  json?: boolean;
  concurrency?: number;
  latency?: number;
  verbose?: boolean;
}

/** `orq run`: every role in this process, one session from submit to its end, with progress. */
export function registerRunCommand(program: Command): void {
  program
    .command('run')
    .description('Run one instruction end to end in this process (all roles), printing progress')
    .argument('<instruction>', 'what you want done')
    .option('-c, --config <file>', 'configuration file (YAML or JSON)')
    .option('--scenario <file>', 'script the builtin provider with a scenario file')
    .option('--json', 'print the final session with its tasks as JSON on stdout')
    .option('--concurrency <n>', 'jobs per role in parallel', parsePositiveInt)
    .addOption(
      new Option('--latency <ms>', 'simulated builtin model latency').argParser(Number).hideHelp(),
    )
    .option('-v, --verbose', 'log role activity (JSON lines on stderr)')
    .action(async (instruction: string, options: RunOptions) => {
      const config = cliConfig(options);
      const out = options.json ? process.stderr : process.stdout;
      const logger = createLogger({ level: options.verbose ? 'info' : 'warn', fd: 2 });
      const redis = await redisForCli(config);
      if (redis.owned)
        out.write(`orq: started a private redis-server at ${redis.url} (data in .orq/redis)\n`);
      const pod = await startRoles({
        roles: ALL_ROLES,
        connection: redis.connection,
        config,
        logger,
        ...(options.concurrency ? { concurrency: options.concurrency } : {}),
        ...(options.latency !== undefined ? { latencyMs: options.latency } : {}),
      });
      const client = await createClient({ connection: redis.connection, config });
      const stop = stopOnSignals();
      try {
        const session = await client.submit({ instruction });
        out.write(`orq: session ${session.id} submitted\n`);
        const mode = followMode(out, false);
        const view = await followSession(client, session.id, { mode, out, signal: stop.signal });
        if (options.json) printJson(view);
        // The live frame already shows the table; plain progress ends with it.
        else if (mode !== 'live') out.write(`\n${formatSessionTable(view)}\n`);
        if (view.session.state === 'BLOCKED' && !stop.interrupted()) {
          out.write(
            `orq: the session is blocked. Start the roles (\`orq start\`) and run \`orq resume ${session.id}\` to go on.\n`,
          );
          process.exitCode = ExitCode.NOT_COMPLETED;
        } else {
          process.exitCode = reportOutcome(view, stop.interrupted());
        }
      } finally {
        stop.dispose();
        await client.close();
        await pod.close(10_000);
        await redis.release();
      }
    });
}
