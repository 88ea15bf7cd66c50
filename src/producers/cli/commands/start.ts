import type { Command } from 'commander';
import { createLogger } from '../../../shared/logger.js';
import { Role } from '../../../shared/queues.js';
import { OrqError } from '../../../shared/errors.js';
import { startRoles } from '../../../workers/registry.js';
import { cliConfig, parsePositiveInt } from '../common.js';

function parseRoles(value: string): Role[] {
  const roles = value
    .split(',')
    .map((r) => r.trim())
    .filter(Boolean);
  for (const role of roles) {
    if (!Role.safeParse(role).success) {
      throw new OrqError('VALIDATION_FAILED', `unknown role "${role}"`, {
        hint: `Roles are ${Role.options.join(', ')}.`,
      });
    }
  }
  return roles as Role[];
}

/** `orq start`: the consumers of a pod, until SIGTERM/SIGINT (then a bounded graceful close). */
export function registerStartCommand(program: Command): void {
  program
    .command('start')
    .description('Run role consumers against a shared Redis (one pod)')
    .option(
      '--roles <list>',
      'comma-separated roles: planner,judge,worker,replanner,coordinator',
      'planner,judge,worker,replanner,coordinator',
    )
    .option(
      '--concurrency <n>',
      'jobs per role in parallel (default: config.concurrency)',
      parsePositiveInt,
    )
    .option(
      '--shutdown-timeout <ms>',
      'time active jobs get to finish on SIGTERM',
      parsePositiveInt,
      30_000,
    )
    .option('-c, --config <file>', 'configuration file (YAML or JSON)')
    .action(
      async (options: {
        roles: string;
        concurrency?: number;
        shutdownTimeout: number;
        config?: string;
      }) => {
        const roles = parseRoles(options.roles);
        const config = cliConfig(options);
        if (!config.redis.url) {
          throw new OrqError('CONFIG_INVALID', 'orq start needs a shared Redis', {
            hint: 'Set REDIS_URL (or redis.url in the config file); use `orq run` for a single-process run.',
          });
        }
        const logger = createLogger({ level: config.logLevel });
        const pod = await startRoles({
          roles,
          connection: config.redis.url,
          config,
          logger,
          ...(options.concurrency ? { concurrency: options.concurrency } : {}),
        });
        await new Promise<void>((resolve) => {
          const shutdown = (signal: string) => {
            logger.info(
              { signal, timeoutMs: options.shutdownTimeout },
              'shutting down: finishing active jobs',
            );
            void pod.close(options.shutdownTimeout).then(resolve);
          };
          process.once('SIGTERM', () => shutdown('SIGTERM'));
          process.once('SIGINT', () => shutdown('SIGINT'));
        });
        logger.info('stopped');
      },
    );
}
