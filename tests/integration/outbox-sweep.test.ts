import { describe, expect, it } from 'vitest';
import { clusterPerTest, type TestCluster } from '../support/cluster.js';
import { sessionIndexKey } from '../../src/shared/store/keys.js';
import { writeUnflushedSession } from '../support/unflushed-session.js';

let cluster: TestCluster | undefined;
const startCluster = clusterPerTest();

describe('outbox sweeper', () => {
  it('enqueues the first plan job of a session whose producer died before flushing', async () => {
    cluster = await startCluster({ pods: 0 });
    const store = cluster.client.store;
    const id = 'crashed-producer';
    await writeUnflushedSession(store, id);
    expect(await store.readOutbox(id)).toHaveLength(1);

    await cluster.startPod();
    const view = await cluster.client.wait(id, { timeoutMs: 20_000 });
    expect(view.session.state).toBe('COMPLETED');
    expect(await store.readOutbox(id)).toHaveLength(0);
  });

  it('finds a stranded outbox behind more than a page of newer sessions', async () => {
    cluster = await startCluster({ pods: 0 });
    const store = cluster.client.store;
    const id = 'crashed-long-ago';
    await writeUnflushedSession(store, id);
    // 2,500 newer sessions in the index (ids only: the sweep reads their empty outboxes).
    const newer = Date.now() + 1000;
    const members = Array.from({ length: 2500 }, (_, i) => [newer + i, `newer-${i}`]).flat();
    await store.redis.zadd(sessionIndexKey(store.prefix), ...members);

    await cluster.startPod();
    const view = await cluster.client.wait(id, { timeoutMs: 20_000 });
    expect(view.session.state).toBe('COMPLETED');
    expect(await store.readOutbox(id)).toHaveLength(0);
  });
});
