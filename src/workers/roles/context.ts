import type { z } from 'zod';
import { describeZodIssues, OrqError } from '../../shared/errors.js';
import type { Logger } from '../../shared/logger.js';
import type { QueueSet } from '../../shared/queue-set.js';
import type { SessionStore } from '../../shared/store/session-store.js';
import type { ModelResolver } from '../models.js';

/** What every role processor gets: state to read, queues to write, models to call. */
export interface RoleContext {
  store: SessionStore;
  queues: QueueSet;
  models: ModelResolver;
  logger: Logger;
}

/**
 * Checks a model's reply against its schema before it leaves the role. An off-schema reply
 * that went on as a coordinator event would fail the coordinator's own validation, where no
 * job-failed event is raised, and leave the session stuck in PLANNING or RUNNING. Thrown here
 * as LLM_OUTPUT_INVALID (not a ValidationError), the role job is retried within the queue's
 * attempts (a model may answer well the next time) and its last failure is recorded by the
 * coordinator, which fails the session or blocks the task (DESIGN.md: bad input never crashes a
 * consumer; malformed LLM output gets a bounded retry, then a clear failure in the history).
 */
export function checkReply<T extends z.ZodType>(
  schema: T,
  value: unknown,
  what: string,
  details: Record<string, unknown>,
): z.infer<T> {
  const result = schema.safeParse(value);
  if (result.success) return result.data;
  const issues = describeZodIssues(result.error);
  throw new OrqError(
    'LLM_OUTPUT_INVALID',
    `The model's ${what} does not match its schema: ${issues.map((i) => `${i.path}: ${i.message}`).join('; ')}`,
    { details: { ...details, issues } },
  );
}
