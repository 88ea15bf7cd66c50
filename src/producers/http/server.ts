import fastifySwagger from '@fastify/swagger';
import Fastify, { LogController, type FastifyBaseLogger, type FastifyInstance } from 'fastify';
import {
  createJsonSchemaTransform,
  createJsonSchemaTransformObject,
  serializerCompiler,
  validatorCompiler,
} from 'fastify-type-provider-zod';
import { listenError } from '../../shared/listen-error.js';
import { silentLogger, type Logger } from '../../shared/logger.js';
import { QueueSet } from '../../shared/queue-set.js';
import { createConnection, type ConnectionInput } from '../../shared/redis.js';
import { ORQ_VERSION } from '../../shared/version.js';
import type { OrqClient } from '../client.js';
import { refuseRepeatedQueryParameters } from './repeated-query.js';
import { trackAllowedMethods } from './allowed-methods.js';
import { assertSafeToListen, installAuth } from './auth.js';
import { frameworkErrorHandler, installErrorHandler, MAX_PATH_PARAM_LENGTH } from './errors.js';
import { createApiMetrics } from './metrics.js';
import { openApiRegistry } from './openapi-registry.js';
import { registerBoard } from './routes/board.js';
import type { RouteContext } from './routes/context.js';
import { registerEventRoutes } from './routes/events.js';
import { registerHealthRoutes } from './routes/health.js';
import { registerMetricsRoute } from './routes/metrics.js';
import { registerOpenApiRoute } from './routes/openapi.js';
import { registerSessionRoutes } from './routes/sessions.js';
import { SAFE_SESSION_OVERRIDES } from '../../shared/config/override-policy.js';

export interface HttpServerOptions {
  /** The client the routes submit and read through; the caller keeps and closes it. */
  client: OrqClient;
  /**
   * The queues Bull Board shows and /metrics counts. Without it they are opened on `connection`
   * (default: the client's own connection) under `prefix` (default: the client's) and closed
   * with the server.
   */
  queues?: QueueSet;
  connection?: ConnectionInput;
  prefix?: string;
  /** Bearer token required on every route but /healthz and /readyz; no auth when absent. */
  token?: string;
  /** Bull Board without retry/clean/promote/remove actions. */
  readOnlyBoard?: boolean;
  /**
   * Session settings a submit may set (override-policy.ts patterns); default
   * SAFE_SESSION_OVERRIDES, which names no program, file, endpoint or environment variable.
   */
  sessionOverrides?: readonly string[];
  logger?: Logger;
}

/** The API token from an option, else ORQ_API_TOKEN; an empty value means none. */
export function resolveApiToken(
  token: string | undefined,
  env: NodeJS.ProcessEnv = process.env,
): string | undefined {
  const value = token ?? env.ORQ_API_TOKEN;
  return value && value.length > 0 ? value : undefined;
}

function openQueues(options: HttpServerOptions): { queues: QueueSet; close(): Promise<void> } {
  if (options.queues) return { queues: options.queues, close: async () => undefined };
  const prefix = options.prefix ?? options.client.store.prefix;
  if (options.connection === undefined) {
    const queues = new QueueSet(options.client.store.redis, prefix, {});
    return { queues, close: () => queues.close() };
  }
  const redis = createConnection(options.connection, 'producer', options.logger);
  const queues = new QueueSet(redis, prefix, {});
  return {
    queues,
    async close() {
      await queues.close();
      redis.disconnect();
    },
  };
}

/**
 * The HTTP API for other systems: sessions (create, list, get, cancel, resume, delete, prune,
 * history, SSE events), Bull Board at /admin/queues, /openapi.json generated from the zod
 * schemas, probes and Prometheus metrics. Returns a Fastify instance that is ready but not listening.
 */
export async function createHttpServer(options: HttpServerOptions): Promise<FastifyInstance> {
  const logger = (options.logger ?? silentLogger).child({ component: 'http' });
  // Fastify's default stops at 100 characters. Bull Board's job pages take a job id
  // (`work|<session>|<task>|<n>`, task ids up to 200): the routes' own schemas bound the rest.
  const routerOptions = { maxParamLength: MAX_PATH_PARAM_LENGTH };
  const app = Fastify({
    loggerInstance: logger as FastifyBaseLogger,
    // Request lines would carry the board's ?token=…; errors are logged by the error handler.
    logController: new LogController({ disableRequestLogging: true }),
    forceCloseConnections: 'idle',
    routerOptions,
    // The router's own refusals (a bad URL, an over-long id) in orq's error body too. They come
    // before auth, as Fastify's own answers did: they repeat only the caller's path.
    frameworkErrors: frameworkErrorHandler(logger),
  });
  // Fastify reads text/plain as a string, which would be refused as "expected object": the API
  // speaks JSON only, and anything else gets its 415 with the hint to send JSON.
  app.removeContentTypeParser('text/plain');
  // Cancel and resume take no body, and many HTTP clients send an empty one with a JSON content
  // type: that is no body (null, which their schemas accept and the others refuse by name), not
  // the invalid JSON Fastify's parser calls it. Anything else is parsed as Fastify parses it.
  const parseJson = app.getDefaultJsonParser('error', 'error');
  app.removeContentTypeParser('application/json');
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (request, body, done) =>
    body === '' ? done(null, null) : parseJson(request, body as string, done),
  );
  const routeMethods = trackAllowedMethods(app, routerOptions);
  app.setValidatorCompiler(validatorCompiler);
  app.setSerializerCompiler(serializerCompiler);

  const { queues, close: closeQueues } = openQueues(options);
  const metrics = createApiMetrics({
    redis: options.client.store.redis,
    prefix: options.client.store.prefix,
    queues,
    logger,
  });
  const ctx: RouteContext = {
    client: options.client,
    queues,
    metrics,
    logger,
    streams: new Set(),
    sessionOverrides: options.sessionOverrides ?? SAFE_SESSION_OVERRIDES,
  };

  installErrorHandler(app, logger, routeMethods);
  installAuth(app, options.token);
  app.addHook('onResponse', async (request, reply) => {
    metrics.httpRequests.inc({
      method: request.method,
      route: request.routeOptions.url ?? 'unmatched',
      status: String(reply.statusCode),
    });
  });
  app.addHook('preClose', async () => {
    for (const stream of ctx.streams) stream.abort();
  });
  app.addHook('onClose', async () => {
    await closeQueues();
  });

  const schemaRegistry = openApiRegistry();
  await app.register(fastifySwagger, {
    openapi: {
      info: {
        title: 'orq',
        description:
          'Submit instructions to orq, follow their sessions and history. Auth: `Authorization: Bearer <ORQ_API_TOKEN>` when the server has a token.',
        version: ORQ_VERSION,
      },
      components: {
        securitySchemes: { bearer: { type: 'http', scheme: 'bearer' } },
      },
      security: options.token ? [{ bearer: [] }] : [],
    },
    transform: createJsonSchemaTransform({ schemaRegistry }),
    transformObject: createJsonSchemaTransformObject({ schemaRegistry }),
  });

  refuseRepeatedQueryParameters(app);
  registerHealthRoutes(app, ctx);
  registerSessionRoutes(app, ctx);
  registerEventRoutes(app, ctx);
  registerMetricsRoute(app, ctx);
  registerOpenApiRoute(app);
  await registerBoard(app, queues, { readOnly: options.readOnlyBoard ?? false });

  await app.ready();
  return app;
}

export interface StartHttpServerOptions extends HttpServerOptions {
  host: string;
  /** 0 picks a free port; read it from the returned `url`. */
  port: number;
}

export interface RunningHttpServer {
  app: FastifyInstance;
  /** http://host:port of the listening server. */
  url: string;
  close(): Promise<void>;
}

/**
 * Listens on host:port. The token defaults to ORQ_API_TOKEN; without one it refuses any address
 * other than loopback, before opening a socket.
 */
export async function startHttpServer(options: StartHttpServerOptions): Promise<RunningHttpServer> {
  const token = resolveApiToken(options.token);
  assertSafeToListen(options.host, token);
  const app = await createHttpServer({ ...options, ...(token ? { token } : {}) });
  try {
    await app.listen({ host: options.host, port: options.port });
  } catch (error) {
    await app.close();
    throw listenError(error, {
      host: options.host,
      port: options.port,
      portOption: '--port (or http.port in the config)',
      hostOption: '--host (or http.host)',
    });
  }
  const address = app.server.address();
  const port = typeof address === 'object' && address ? address.port : options.port;
  const host = options.host.includes(':') ? `[${options.host}]` : options.host;
  return { app, url: `http://${host}:${port}`, close: () => app.close() };
}
