import type { FastifyInstance } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import type { Logger } from '../../../shared/logger.js';
import type { QueueSet } from '../../../shared/queue-set.js';
import type { OrqClient } from '../../client.js';
import type { ApiMetrics } from '../metrics.js';
import type { StreamSlots } from '../stream-slots.js';

/** What every route module needs; built once by createHttpServer. */
export interface RouteContext {
  client: OrqClient;
  queues: QueueSet;
  metrics: ApiMetrics;
  logger: Logger;
  /** Open SSE streams, ended when the server closes so close() does not wait on them. */
  streams: Set<AbortController>;
  /** Open event streams per caller, under HttpServerOptions.maxStreamsPerCaller. */
  streamSlots: StreamSlots;
  /** Session settings a submit may set (HttpServerOptions.sessionOverrides). */
  sessionOverrides: readonly string[];
  /** `provider/model` choices offered besides the operator's own (HttpServerOptions.offeredModels). */
  offeredModels: readonly string[];
}

/** The Fastify instance with zod schemas as the type provider. */
export function typed(app: FastifyInstance) {
  return app.withTypeProvider<ZodTypeProvider>();
}
