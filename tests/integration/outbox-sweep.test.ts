import { describe, expect, it } from 'vitest';
import { clusterPerTest, type TestCluster } from '../support/cluster.js';
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
});
