import type { Command } from 'commander';
import { configOption, parsePort } from '../options.js';
import type { DashboardOptions } from './dashboard-serve.js';

/** `orq dashboard`: the HTTP API, the session view and Bull Board on the CLI's Redis, until SIGTERM/SIGINT. */
export function registerDashboardCommand(program: Command): void {
  program
    .command('dashboard')
    .description(
      'Serve the HTTP API, the session view (/ui) and Bull Board (/admin/queues) until stopped',
    )
    .option('--host <host>', 'address to listen on (default: config http.host, 127.0.0.1)')
    .option('--port <n>', 'port, 0 for a free one (default: config http.port, 3000)', parsePort)
    .option(
      '--read-only-board',
      'Bull Board without retry/clean (even for ORQ_OPERATOR_TOKEN), the session view without resume/cancel',
    )
    .option(...configOption)
    .action(async (options: DashboardOptions) =>
      (await import('./dashboard-serve.js')).serveDashboard(options),
    );
}
