import { Option, type Command } from 'commander';
import {
  configOption,
  fairnessOptions,
  parseConcurrency,
  parseLatency,
  priorityOption,
  readInstruction,
  tenantOption,
} from '../options.js';
import type { RunHereOptions } from '../run-here.js';

/** `orq run`: every role in this process, one session from submit to its end, with progress. */
export function registerRunCommand(program: Command): void {
  program
    .command('run')
    .description('Run one instruction end to end in this process (all roles), printing progress')
    .argument('<instruction>', 'what you want done; - reads it from stdin', readInstruction)
    .option(...configOption)
    .option('--scenario <file>', 'script the builtin provider with a scenario file')
    .option(
      '--session-config <json|file>',
      'per-session overrides, inline JSON (e.g. {"budget":{"maxTokens":50000}}) or a YAML/JSON file; relative paths in them are resolved against this directory',
    )
    .option(...tenantOption)
    .option(...priorityOption)
    .option('--json', 'print the final session with its tasks as JSON on stdout')
    .option('--concurrency <n>', 'jobs per role in parallel', parseConcurrency)
    .addOption(
      new Option('--latency <ms>', 'simulated builtin model latency')
        .argParser(parseLatency)
        .hideHelp(),
    )
    .option('-v, --verbose', 'log role activity (JSON lines on stderr)')
    .action(
      async (
        instruction: string,
        options: RunHereOptions & { sessionConfig?: string; tenant?: string; priority?: number },
      ) => {
        // Loaded here, not at start: `--help` and a usage error need neither the client nor the roles.
        const { sessionOverrides, submittedSessionConfig } = await import('../common.js');
        const { checkRunnable, runHere } = await import('../run-here.js');
        const { keysSetHere, modelsNotice } = await import('../models-notice.js');
        // Bad JSON is a usage error before anything starts.
        const overrides = sessionOverrides(options.sessionConfig);
        await runHere(
          options,
          async (client, out) => {
            const session = await client.submit({
              instruction,
              ...(overrides ? { config: overrides } : {}),
              ...fairnessOptions(options),
            });
            // Once, from the config the session got: which models (or none) do its work. The
            // keys are out of the environment by now (runHere); keysSetHere still sees them.
            process.stderr.write(
              modelsNotice({
                llm: session.config.llm,
                audience: 'run',
                keysSet: keysSetHere(),
                cwd: process.cwd(),
              }),
            );
            out.write(`orq: session ${session.id} submitted\n`);
            return { sessionId: session.id };
          },
          // Before Redis and the roles start: the session's config is known from the command line.
          // Without --session-config it is the configuration's, and so are its errors.
          {
            preflight: (config) =>
              checkRunnable(submittedSessionConfig(config, overrides, options)),
            submitChecks: overrides === undefined,
          },
        );
      },
    );
}
