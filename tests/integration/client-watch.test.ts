import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { HistoryEntry } from '../../src/shared/domain/history.js';
import { readSettling } from '../../src/shared/store/pending-resumes.js';
import { startCluster, type TestCluster } from '../support/cluster.js';

// No roles: this test moves the session itself.
let cluster: TestCluster;

beforeAll(async () => {
  cluster = await startCluster({ pods: 0 });
}, 30_000);

afterAll(async () => {
  await cluster?.close();
});

describe('watch', () => {
  it('yields the entries of the write that ended the session after its last read of the history', async () => {
    const { client } = cluster;
    const { id } = await client.submit({ instruction: 'ends between two reads' });
    const { store } = client;
    // The watch reads the session's state once a read of its history found nothing new: the
    // session completes in between, as a coordinator's write may.
    await readSettling(store, id);
    const redis = store.redis as unknown as Record<string, (...args: unknown[]) => unknown>;
    const read = redis.orqReadSettling!.bind(store.redis);
    let completed = false;
    redis.orqReadSettling = async (...args: unknown[]) => {
      if (!completed) {
        completed = true;
        const snapshot = await store.requireSession(id);
        await store.apply(id, {
          eventId: `test-complete|${id}`,
          session: {
            record: { ...snapshot.session, state: 'COMPLETED' },
            expectedVersion: snapshot.version,
          },
          history: [{ type: 'state_change', entity: 'session', from: 'PLANNING', to: 'COMPLETED' }],
        });
      }
      return read(...args);
    };
    try {
      const entries: HistoryEntry[] = [];
      for await (const { entry } of client.watch(id, { blockMs: 50 })) entries.push(entry);
      expect(completed).toBe(true);
      expect(entries.at(-1)).toMatchObject({ type: 'state_change', to: 'COMPLETED' });
    } finally {
      delete redis.orqReadSettling;
    }
  });
});
