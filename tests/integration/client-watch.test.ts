import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import type { HistoryEntry } from '../../src/shared/domain/history.js';
import { readSettling } from '../../src/shared/store/pending-resumes.js';
import type { SessionStore } from '../../src/shared/store/session-store.js';
import { startCluster, type TestCluster } from '../support/cluster.js';
import { eventually } from '../support/scenarios.js';

// No roles: this test moves the session itself.
let cluster: TestCluster;

/** Completes a PLANNING session as a coordinator's write would. */
async function complete(store: SessionStore, id: string): Promise<void> {
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
        await complete(store, id);
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

  it('ends when it reads the move that settles the session, without another blocking read', async () => {
    const { client } = cluster;
    const { id } = await client.submit({ instruction: 'ends without one more wait' });
    const entries: HistoryEntry[] = [];
    // Each read waits up to ten minutes for entries: a watch that read once more after the
    // last entry before it looked at the session would outlast the test's timeout.
    const watching = (async () => {
      for await (const { entry } of client.watch(id, { blockMs: 600_000 })) entries.push(entry);
    })();
    await eventually(() => (entries.length > 0 ? true : undefined), 'the first entries');
    await complete(client.store, id);
    await watching;
    expect(entries.at(-1)).toMatchObject({ type: 'state_change', to: 'COMPLETED' });
  });

  it("waits for the client's own connection when it drops alone, and goes on to the end", async () => {
    const { client } = cluster;
    const { id } = await client.submit({ instruction: 'a connection dropped mid-watch' });
    const { store } = client;
    const connections: boolean[] = [];
    const entries: HistoryEntry[] = [];
    // Reads the session's state every 50 ms: the drop below falls between two of them.
    const watching = (async () => {
      for await (const { entry } of client.watch(id, {
        blockMs: 50,
        onConnection: ({ up }) => connections.push(up),
      })) {
        entries.push(entry);
      }
    })();
    await eventually(() => (entries.length > 0 ? true : undefined), 'the first entries');

    // The client's connection (not the watch's own) is cut: it reconnects about 200 ms later,
    // and fails every command until then.
    const admin = new Redis(inject('redisUrl'));
    const back = new Promise((resolve) => store.redis.once('ready', resolve));
    try {
      const mainId = await store.redis.client('ID');
      expect(await admin.client('KILL', 'ID', String(mainId))).toBe(1);
    } finally {
      admin.disconnect();
    }
    await back;
    await complete(store, id);
    await watching;
    expect(entries.at(-1)).toMatchObject({ type: 'state_change', to: 'COMPLETED' });
    // The watch's own connection never dropped: nothing to report.
    expect(connections).toEqual([]);
  });
});
