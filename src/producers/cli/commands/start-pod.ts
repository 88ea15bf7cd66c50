import { hostname } from 'node:os';
import { loadConfig } from '../../../shared/config/load.js';
import { createLogger } from '../../../shared/logger.js';
import { Role } from '../../../shared/queues.js';
import { OrqError } from '../../../shared/errors.js';
import { configuredConnection } from '../../../shared/redis.js';
import { settlesWithin } from '../../../shared/settles-within.js';
import { listenForStop, stopReceived } from '../stop-signal.js';

// The roles, their models and BullMQ load only after the pod has said it is starting (below):
// a pod printed nothing while they loaded (15 to 20 s on a loaded machine).

export interface StartOptions {
  roles: string;
  concurrency?: number;
  shutdownTimeout: number;
  config?: string;
  latency?: number;
  metricsPort?: number;
  metricsHost: string;
}

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
  if (roles.length === 0) {
    // A pod that runs nothing would look healthy and never take a job.
    throw new OrqError('VALIDATION_FAILED', '--roles names no role', {
      hint: `Give one or more of ${Role.options.join(', ')}, comma-separated (default: all).`,
    });
  }
  return roles as Role[];
}

/** A pod's metrics and its HTTP listener: prom-client loads only for such a pod. */
async function serveMetrics(host: string, port: number) {
  const { createRoleMetrics } = await import('../../../workers/metrics.js');
  const { startPodServer } = await import('../../../workers/pod-server.js');
  const metrics = createRoleMetrics();
  return { metrics, server: await startPodServer({ host, port, metrics }) };
}

/** After a stop signal, how long roles that are starting get to finish starting and then stop. */
const STARTING_GRACE_MS = 2_000;

/** `orq start`'s action (commands/start.ts declares it): the pod, until a stop signal. */
export async function startPod(options: StartOptions): Promise<void> {
  const roles = parseRoles(options.roles);
  const config = loadConfig(options.config ? { file: options.config } : {});
  const connection = configuredConnection(config);
  if (!connection) {
    throw new OrqError('CONFIG_INVALID', 'orq start needs a shared Redis', {
      hint: 'Set REDIS_URL (or redis.url in the config file); use `orq run` for a single-process run.',
    });
  }
  const logger = createLogger({ level: config.logLevel });
  // The first line, before the slow part of start-up: which pod, which roles, on which prefix.
  logger.info({ roles, pod: hostname(), prefix: config.redis.prefix }, 'pod starting');
  // Listened for since the process began (main.ts): a SIGTERM that arrives while the modules
  // load, the consumers connect, or just after 'roles started' is logged must still stop the pod
  // gracefully instead of killing the process.
  const stopSignal = listenForStop();
  // Counts, durations and states only, no session data: fine for a scraper beyond loopback.
  // Listen before the consumers start, so a taken port fails the command before it takes
  // jobs; /readyz answers `starting` until they run.
  const served = options.metricsPort
    ? await serveMetrics(options.metricsHost, options.metricsPort)
    : undefined;
  const early = stopReceived();
  if (early) {
    // Stopped before it took a job: nothing to start, nothing to hand back.
    logger.info({ signal: early }, 'stopped while starting; no job was taken');
    await served?.server.close();
    process.exit(0);
  }
  // Which models the roles here call for the sessions of this config, or that none does: said
  // once nothing can refuse the pod any more (a taken metrics port is its one line).
  const { keysSetHere, modelsNotice } = await import('../models-notice.js');
  process.stderr.write(
    modelsNotice({
      llm: config.llm,
      audience: 'pod',
      roles,
      keysSet: keysSetHere(),
      cwd: process.cwd(),
    }),
  );
  const { launchRoles } = await import('../../../workers/registry.js');
  const starting = launchRoles(
    {
      roles,
      connection,
      config,
      logger,
      ...(options.concurrency ? { concurrency: options.concurrency } : {}),
      ...(options.latency !== undefined ? { latencyMs: options.latency } : {}),
      ...(served ? { metrics: served.metrics } : {}),
    },
    'REDIS_URL',
  );
  // The roles start only once Redis answers, which may be never: a stop signal meanwhile
  // must still stop the pod (Kubernetes sends one SIGTERM, then waits for its grace period).
  const started = await Promise.race([
    starting,
    stopSignal.then(async (signal) =>
      (await settlesWithin(starting, STARTING_GRACE_MS)) ? starting : signal,
    ),
  ]);
  if (typeof started === 'string') {
    logger.info({ signal: started }, 'stopped while waiting for Redis; no job was taken');
    await served?.server.close();
    process.exit(0);
  }
  const pod = started;
  served?.server.setHealth(() => pod.health());
  if (served) logger.info({ url: served.server.url }, 'metrics and probes listening');
  const signal = await stopSignal;
  logger.info(
    { signal, timeoutMs: options.shutdownTimeout },
    'shutting down: finishing active jobs',
  );
  await pod.close(options.shutdownTimeout);
  await served?.server.close();
  logger.info('stopped');
  // A job that ignored the shutdown abort must not keep a stopped pod alive past its bound
  // (unref'd: a pod whose work all ended exits at once, as usual).
  setTimeout(() => process.exit(), 1_000).unref();
}
