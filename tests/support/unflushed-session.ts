import { expect } from 'vitest';
import { SessionConfig } from '../../src/shared/config/schema.js';
import { Session } from '../../src/shared/domain/session.js';
import { jobIds, outboxJob } from '../../src/shared/queues.js';
import type { SessionStore } from '../../src/shared/store/session-store.js';

/**
 * What submit writes atomically for session `id`, its first plan job in the outbox, without
 * the flush that follows: the state a producer leaves when it dies in between.
 */
export async function writeUnflushedSession(store: SessionStore, id: string): Promise<void> {
  const now = new Date().toISOString();
  const session = Session.parse({
    id,
    instruction: 'write docs and add tests',
    state: 'PLANNING',
    createdAt: now,
    updatedAt: now,
    requiredTerms: { terms: ['docs', 'tests'], source: 'user-input' },
    config: SessionConfig.parse({}),
    planning: {},
  });
  const applied = await store.apply(id, {
    eventId: `submit|${id}`,
    session: { record: session, expectedVersion: 0 },
    outbox: [outboxJob('plan', 'plan', jobIds.plan(id, 0), { sessionId: id, attempt: 0 })],
  });
  expect(applied.status).toBe('OK');
  await store.indexSession(session);
}
