import { z } from 'zod';
import { HistoryEntry } from '../../shared/domain/history.js';
import { Session, SessionId, TenantId } from '../../shared/domain/session.js';
import { ListCursorText } from '../../shared/store/session-index.js';
import { CancelReason, StreamId } from '../client.js';
import { TaskProgress } from '../../shared/domain/progress.js';
import { BuiltinUse } from '../../shared/domain/result.js';
import { Task } from '../../shared/domain/task.js';
import { SessionUsage } from '../../shared/store/usage-store.js';

/**
 * The HTTP API's own shapes. Requests reuse the client's SubmitRequest/ResumeRequest and the
 * domain schemas, so validation, the TypeScript types and the OpenAPI document share one source.
 */

export { StreamId };

export const SessionParams = z.object({ id: SessionId });

export const ListQuery = z.object({
  limit: z.coerce.number().int().min(1).max(500).default(50),
  /** Sessions skipped (after the cursor, when there is one). */
  offset: z.coerce.number().int().min(0).default(0),
  /** The cursor a page's Link header (rel="next") carries: the next page starts after it. */
  after: ListCursorText.optional(),
  /** Only this tenant's sessions (a tenant's key always lists its own). */
  tenant: TenantId.optional(),
});

export const HistoryQuery = z.object({
  /** jsonl: seed 004's line format, one entry per line (also chosen by Accept: application/x-ndjson). */
  format: z.enum(['json', 'jsonl']).optional(),
  /** Only entries after this stream id. */
  after: StreamId.optional(),
  limit: z.coerce.number().int().min(1).max(100_000).optional(),
});

export const ResultQuery = z.object({
  /** true: the result so far of a session still planning or running, instead of a 409. */
  partial: z.enum(['true', 'false']).optional(),
});

export const EventsQuery = z.object({
  /** Resume after this stream id; the Last-Event-ID header does the same and wins. */
  after: StreamId.optional(),
});

export const Counters = z.object({ open: z.number().int(), active: z.number().int() });

export const SessionView = z.object({
  session: Session,
  tasks: z.array(Task),
  counters: Counters,
  usage: SessionUsage,
  /** What each executing task is doing, when its executor reports it (by task id). */
  progress: z.record(z.string(), TaskProgress),
  /** Executing tasks whose work job waits for a worker: none has taken it yet. */
  queued: z.array(z.string()),
  ...BuiltinUse.shape,
});

export const StoredHistoryEntry = z.object({ id: StreamId, entry: HistoryEntry });

/** Fastify hands a POST without a body over as null: both cancel and resume accept none. */
export const CancelRequest = z.strictObject({ reason: CancelReason.optional() }).nullish();

export const Accepted = z.object({
  sessionId: SessionId,
  /** The resume request's id (resume only). */
  requestId: z.string().optional(),
  accepted: z.literal(true),
});

export const Health = z.object({
  status: z.enum(['ok', 'unavailable']),
  redis: z.string().optional(),
});
