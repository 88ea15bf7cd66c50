// The orq command: its commands, parsed and run (main.ts loads it).
import { Command } from 'commander';
import { muteBullmqEvictionWarnings } from '../../shared/bullmq-warnings.js';
import { ORQ_VERSION } from '../../shared/version.js';
import { startTracing, stopTracing } from '../../shared/tracing/sdk.js';
import { registerConfigCommands } from './commands/config.js';
import { registerDashboardCommand } from './commands/dashboard.js';
import { registerKeysCommands } from './commands/keys.js';
import { registerResultCommand } from './commands/result.js';
import { registerRetentionCommands } from './commands/retention.js';
import { registerRunCommand } from './commands/run.js';
import { registerSessionCommands } from './commands/sessions.js';
import { registerApprovalCommands } from './commands/approval.js';
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
registerApprovalCommands(program);
registerResultCommand(program);
registerRetentionCommands(program);
registerConfigCommands(program);
registerDashboardCommand(program);
registerKeysCommands(program);

// Traces only when an OTLP endpoint is set (OTEL_* variables): otherwise the SDK is not loaded.
// Started before the command runs, so a refused setting (a grpc protocol) reads as orq's errors do.
program.hook('preAction', async () => {
  await startTracing();
});
await runCli(program, process.argv);
// The spans still buffered go out before the process ends.
await stopTracing().catch(() => undefined);
// Every command has closed what it opened by now. A connection that could not close (Redis went
// away during the shutdown, and BullMQ's quit waits for it) must not keep the process alive.
setTimeout(() => process.exit(), 1_000).unref();
