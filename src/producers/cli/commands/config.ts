import type { Command } from 'commander';

/** `orq config schema|check`: filled in by the config tooling work. */
export function registerConfigCommands(program: Command): void {
  program.command('config').description('Configuration tools');
}
