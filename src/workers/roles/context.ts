import { isExecuting, type Task } from '../../shared/domain/task.js';
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

export { checkReply } from '../../shared/llm/check-reply.js';

/**
 * Whether a work or judge job for `attempt` is still the task's current execution. BullMQ may
 * deliver a job again after its task moved on (a stalled job whose pod was only slow): the
 * attempt alone is not enough, as a task keeps it once DONE, BLOCKED or being replanned, and
 * running it again would spend a model call and repeat the executor's side effects for a
 * result the coordinator ignores.
 */
export function isCurrentExecution(task: Task, attempt: number): boolean {
  return task.attempts === attempt && isExecuting(task);
}
