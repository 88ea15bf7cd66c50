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
