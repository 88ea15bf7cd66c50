// The orq command: its commands, parsed and run (main.ts loads it).
import { Command } from 'commander';
import { muteBullmqEvictionWarnings } from '../../shared/bullmq-warnings.js';
import { ORQ_VERSION } from '../../shared/version.js';
import { registerConfigCommands } from './commands/config.js';
import { registerDashboardCommand } from './commands/dashboard.js';
import { registerRetentionCommands } from './commands/retention.js';
import { registerRunCommand } from './commands/run.js';
import { registerSessionCommands } from './commands/sessions.js';
import { registerStartCommand } from './commands/start.js';
import { runCli } from './run-cli.js';
import { handleStdoutError } from './stdout-closed.js';

// The pods log a Redis eviction policy that can lose jobs; a CLI command need not repeat it.
muteBullmqEvictionWarnings();

process.stdout.on('error', handleStdoutError);

const program = new Command()
  .name('orq')
  .description('Distributed orchestrator for LLM agents on BullMQ and Redis')
  .version(ORQ_VERSION);

registerRunCommand(program);
registerStartCommand(program);
registerSessionCommands(program);
registerRetentionCommands(program);
registerConfigCommands(program);
registerDashboardCommand(program);

await runCli(program, process.argv);
// Every command has closed what it opened by now. A connection that could not close (Redis went
// away during the shutdown, and BullMQ's quit waits for it) must not keep the process alive.
setTimeout(() => process.exit(), 1_000).unref();
