import type { Command } from 'commander';
import { configOption } from '../options.js';
import type { ResultOptions } from './result-action.js';

/** `orq result`: what a session produced. The action loads when it runs, as the others do. */
export function registerResultCommand(program: Command): void {
  program
    .command('result')
    .description(
      "Print what a session produced: its final tasks' outputs (notes on anything missing go to stderr)",
    )
    .argument('<sessionId>')
    .option(...configOption)
    .option('--json', 'print the result as JSON: outputs, missing tasks, notes and text')
    .option('--partial', 'give the result so far of a session still planning or running')
    .action(async (sessionId: string, options: ResultOptions) =>
      (await import('./result-action.js')).result(sessionId, options),
    );
}
