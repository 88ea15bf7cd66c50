import { describe, expect, it } from 'vitest';
import { SessionConfig } from '../../src/shared/config/schema.js';
import { Session } from '../../src/shared/domain/session.js';
import { jobIds, outboxJob } from '../../src/shared/queues.js';
import { clusterPerTest, type TestCluster } from '../support/cluster.js';

let cluster: TestCluster | undefined;
const startCluster = clusterPerTest();

describe('outbox sweeper', () => {
  it('enqueues the first plan job of a session whose producer died before flushing', async () => {
    cluster = await startCluster({ pods: 0 });
    const store = cluster.client.store;
    const now = new Date().toISOString();
    const id = 'crashed-producer';
    // What submit writes atomically, without the flush that a crash would have prevented.
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
    expect(await store.readOutbox(id)).toHaveLength(1);

    await cluster.startPod();
    const view = await cluster.client.wait(id, { timeoutMs: 20_000 });
    expect(view.session.state).toBe('COMPLETED');
    expect(await store.readOutbox(id)).toHaveLength(0);
  });
});
