import { createLogger } from '../../../shared/logger.js';
import { checkEvictionPolicy } from '../../../shared/redis.js';
import { cliConfig, withClient } from '../common.js';
import { keysSetHere, modelsNotice } from '../models-notice.js';
import { privateRedisDir, type CliRedis } from '../redis-for-cli.js';

/**
 * Without REDIS_URL the dashboard serves the private Redis of this directory, which pods on
 * another Redis never see: a user who forgot REDIS_URL must not wonder where the sessions are.
 */
export function privateRedisNotice(redis: CliRedis): string {
  const how = redis.adopted
    ? 'taken over from an earlier orq command that left it running'
    : redis.owned
      ? 'started for this dashboard'
      : 'shared with the orq commands here';
  return (
    `orq: REDIS_URL is not set: serving the private Redis in ${privateRedisDir()} (${how}) at ${redis.url}; ` +
    'only `orq run` and the `--run` commands in this directory run its sessions. ' +
    "Set REDIS_URL to serve your pods' Redis\n"
  );
}

export interface DashboardOptions {
  host?: string;
  port?: number;
  readOnlyBoard?: boolean;
  config?: string;
}

/** `orq dashboard`'s action (commands/dashboard.ts declares it): serves until a stop signal. */
export async function serveDashboard(options: DashboardOptions): Promise<void> {
  // The HTTP stack (fastify, Bull Board, OpenAPI) loads for this command only.
  const { resolveApiToken, resolveOperatorToken, startHttpServer } =
    await import('../../http/server.js');
  const { assertSafeToListen } = await import('../../http/auth.js');
  const token = resolveApiToken(undefined);
  const operatorToken = resolveOperatorToken(undefined);
  const loaded = cliConfig(options);
  // A bad address or token is a usage error (exit 2), whether or not Redis answers.
  assertSafeToListen(options.host ?? loaded.http.host, token, operatorToken);
  const logger = createLogger({ level: loaded.logLevel, fd: 2 });
  return withClient(
    options,
    async (client, config, redis) => {
      await checkEvictionPolicy(client.store.redis, logger);
      const server = await startHttpServer({
        client,
        host: options.host ?? config.http.host,
        port: options.port ?? config.http.port,
        readOnlyBoard: options.readOnlyBoard ?? config.http.readOnlyBoard,
        sessionOverrides: config.http.sessionOverrides,
        offeredModels: config.http.models,
        mayAnswer: config.http.mayAnswer,
        trustProxy: config.http.trustProxy,
        maxStreamsPerCaller: config.http.maxStreamsPerCaller,
        logger,
        ...(token ? { token } : {}),
        ...(operatorToken ? { operatorToken } : {}),
      });
      const signIn = token ? '?token=<ORQ_API_TOKEN>' : '';
      process.stdout.write(
        `orq: HTTP API on ${server.url} (auth: ${token || operatorToken ? 'bearer token' : 'none, loopback only'}; Bull Board ${operatorToken && !(options.readOnlyBoard ?? config.http.readOnlyBoard) ? 'retry/clean for the operator token' : 'read-only'})\n` +
          `orq: sessions at ${server.url}/ui${signIn}\n` +
          `orq: Bull Board at ${server.url}/admin/queues${signIn}\n` +
          `orq: API reference at ${server.url}/docs${signIn}\n` +
          `orq: OpenAPI at ${server.url}/openapi.json\n`,
      );
      if (!config.redis.url) process.stdout.write(privateRedisNotice(redis));
      // Sessions submitted over this API start from this config: which models they get.
      process.stderr.write(
        modelsNotice({
          llm: config.llm,
          audience: 'dashboard',
          keysSet: keysSetHere(),
          cwd: process.cwd(),
        }),
      );
      await new Promise<void>((resolve) => {
        const stop = (signal: string) => {
          logger.info({ signal }, 'dashboard stopping');
          resolve();
        };
        process.once('SIGTERM', () => stop('SIGTERM'));
        process.once('SIGINT', () => stop('SIGINT'));
      });
      await server.close();
    },
    // The dashboard runs until stopped: a Redis outage meanwhile is logged when it starts
    // and ends, not only when a request fails.
    { config: loaded, logger },
  );
}
