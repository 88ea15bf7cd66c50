import fastifySwagger from '@fastify/swagger';
import Fastify, { LogController, type FastifyBaseLogger, type FastifyInstance } from 'fastify';
import {
  createJsonSchemaTransform,
  createJsonSchemaTransformObject,
  serializerCompiler,
} from 'fastify-type-provider-zod';
import { listenError } from '../../shared/listen-error.js';
import { silentLogger, type Logger } from '../../shared/logger.js';
import { QueueSet } from '../../shared/queue-set.js';
import { createConnection, type ConnectionInput } from '../../shared/redis.js';
import { ORQ_VERSION } from '../../shared/version.js';
import type { OrqClient } from '../client.js';
import { refuseRepeatedQueryParameters } from './repeated-query.js';
import { trackAllowedMethods } from './allowed-methods.js';
import { validatorCompiler } from './validation.js';
import { answerAfterUnreadBody, BODY_LIMIT_BYTES } from './unread-body.js';
import { assertSafeToListen, installAuth } from './auth.js';
import { installBoardGuard } from './board-guard.js';
import { installTenantScope } from './tenant-scope.js';
import { ApiKeyStore } from '../../shared/store/api-keys.js';
import { installSecurityHeaders } from './security-headers.js';
import { DEFAULT_STREAMS_PER_CALLER, StreamSlots } from './stream-slots.js';
import { frameworkErrorHandler, installErrorHandler, MAX_PATH_PARAM_LENGTH } from './errors.js';
import { createApiMetrics } from './metrics.js';
import { openApiRegistry } from './openapi-registry.js';
import { registerBoard } from './routes/board.js';
import { registerDocsRoutes, registerIndexRoute } from './routes/docs.js';
import type { RouteContext } from './routes/context.js';
import { registerEventRoutes } from './routes/events.js';
import { registerHealthRoutes } from './routes/health.js';
import { registerMetricsRoute } from './routes/metrics.js';
import { registerOpenApiRoute } from './routes/openapi.js';
import { registerQuotaRoutes } from './routes/quotas.js';
import { registerResultRoute } from './routes/result.js';
import { registerSessionRoutes } from './routes/sessions.js';
import { registerTenantRoutes } from './routes/tenants.js';
import { registerUiRoutes } from './routes/ui.js';
import { registerApprovalRoutes } from './routes/approval.js';
import type { AnswerRole } from './answer-policy.js';
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
  /**
   * Accept tenants' API keys (`orq keys create`), looked up hashed in the client's Redis. Only
   * with a token or operator token: a server without auth has no callers to tell apart.
   */
  tenantKeys?: boolean;
  /**
   * ORQ_OPERATOR_TOKEN: opens every route as the API token does, and Bull Board's retry and
   * clean. Without it the board is read-only for everyone.
   */
  operatorToken?: string;
  /**
   * Bull Board without retry and clean even for the operator, and the session view without
   * resume/cancel.
   */
  readOnlyBoard?: boolean;
  /**
   * Session settings a submit may set (override-policy.ts patterns); default
   * SAFE_SESSION_OVERRIDES, which names no program, file, endpoint or environment variable.
   */
  sessionOverrides?: readonly string[];
  /**
   * `provider/model` choices (`provider/*` for any model) a submit may make besides those the
   * client's config uses (http.models); none by default.
   */
  offeredModels?: readonly string[];
  /**
   * Trust a TLS-terminating proxy's X-Forwarded-* headers (Fastify's trustProxy: true, a
   * number of hops, or addresses); default false (http.trustProxy).
   */
  trustProxy?: boolean | number | string;
  /** Event streams one caller may hold open at once (http.maxStreamsPerCaller); default 32. */
  maxStreamsPerCaller?: number;
  /** Tokens that may answer a wait for a person (http.mayAnswer); default the operator's. */
  mayAnswer?: readonly AnswerRole[];
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

/** The operator token from an option, else ORQ_OPERATOR_TOKEN; an empty value means none. */
export function resolveOperatorToken(
  token: string | undefined,
  env: NodeJS.ProcessEnv = process.env,
): string | undefined {
  const value = token ?? env.ORQ_OPERATOR_TOKEN;
  return value && value.length > 0 ? value : undefined;
}

/**
 * The HTTP API for other systems: sessions (create, list, get, cancel, resume, delete, prune,
 * history, SSE events), Bull Board at /admin/queues, /openapi.json generated from the zod
 * schemas with its reference page at /docs, an index at /, probes and Prometheus metrics. Returns a Fastify instance that is ready but not listening.
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
    bodyLimit: BODY_LIMIT_BYTES,
    routerOptions,
    // Fastify takes a hop count too (its docs, and proxy-addr); its type leaves number out.
    trustProxy: (options.trustProxy ?? false) as boolean | string,
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
    streamSlots: new StreamSlots(options.maxStreamsPerCaller ?? DEFAULT_STREAMS_PER_CALLER),
    sessionOverrides: options.sessionOverrides ?? SAFE_SESSION_OVERRIDES,
    offeredModels: options.offeredModels ?? [],
  };

  installErrorHandler(app, logger, routeMethods);
  installAuth(app, {
    ...(options.token ? { token: options.token } : {}),
    ...(options.operatorToken ? { operatorToken: options.operatorToken } : {}),
    ...(options.tenantKeys !== false
      ? { apiKeys: new ApiKeyStore(options.client.store.redis, options.client.store.prefix) }
      : {}),
  });
  installTenantScope(app, options.client);
  // The board writes only for the operator, and never adds or rewrites jobs (issue 41).
  const boardReadOnly = (options.readOnlyBoard ?? false) || !options.operatorToken;
  installBoardGuard(app, {
    readOnly: boardReadOnly,
    operatorConfigured: options.operatorToken !== undefined,
  });
  answerAfterUnreadBody(app);
  installSecurityHeaders(app);
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
      security: options.token || options.operatorToken ? [{ bearer: [] }] : [],
    },
    transform: createJsonSchemaTransform({ schemaRegistry }),
    transformObject: createJsonSchemaTransformObject({ schemaRegistry }),
  });

  refuseRepeatedQueryParameters(app);
  registerHealthRoutes(app, ctx);
  registerSessionRoutes(app, ctx);
  registerResultRoute(app, ctx);
  registerTenantRoutes(app, ctx);
  registerEventRoutes(app, ctx);
  registerMetricsRoute(app, ctx);
  registerQuotaRoutes(app, ctx);
  registerUiRoutes(app, ctx, { readOnly: options.readOnlyBoard ?? false });
  registerApprovalRoutes(app, ctx, {
    readOnly: options.readOnlyBoard ?? false,
    mayAnswer: options.mayAnswer ?? ['operator'],
  });
  registerOpenApiRoute(app);
  registerIndexRoute(app, options.token !== undefined || options.operatorToken !== undefined);
  await registerDocsRoutes(app);
  await registerBoard(app, queues, { readOnly: boardReadOnly });

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
  const operatorToken = resolveOperatorToken(options.operatorToken);
  assertSafeToListen(options.host, token, operatorToken);
  const app = await createHttpServer({
    ...options,
    ...(token ? { token } : {}),
    ...(operatorToken ? { operatorToken } : {}),
  });
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
