import { Redis } from 'ioredis';
import { afterAll, describe, expect, inject, it, vi } from 'vitest';
import type { OrqClient } from '../../src/producers/client.js';
import { OrqError } from '../../src/shared/errors.js';
import { idempotencyKey, sessionIndexKey } from '../../src/shared/store/keys.js';
import { deleteSession } from '../../src/shared/store/session-retention.js';
import { SessionStore } from '../../src/shared/store/session-store.js';
import { UsageStore } from '../../src/shared/store/usage-store.js';
import { clusterPerTest } from '../support/cluster.js';
import { makeSession } from '../support/executors.js';
import { A_THEN_B, eventually, scenarioDir } from '../support/scenarios.js';

const startCluster = clusterPerTest();
const scenarios = scenarioDir();
afterAll(() => scenarios.cleanup());
const aThenB = scenarios.write('a-then-b', A_THEN_B);

/** Every Redis key of the session (they all carry its hash tag) but the mark its delete leaves. */
const keysOf = async (client: OrqClient, sessionId: string) =>
  (await client.store.redis.keys(`${client.store.prefix}:s:{${sessionId}}:*`)).filter(
    (key) => key !== client.store.keys(sessionId).deleted,
  );

/** Seconds until the mark of the session's delete expires (-2: there is none). */
const markTtl = (client: OrqClient, sessionId: string) =>
  client.store.redis.ttl(client.store.keys(sessionId).deleted);

async function completed(client: OrqClient, extra: { idempotencyKey?: string } = {}) {
  const { id } = await client.submit({
    instruction: 'do A then B',
    config: { llm: { scenario: aThenB } },
    ...extra,
  });
  const view = await client.wait(id, { timeoutMs: 20_000 });
  expect(view.session.state).toBe('COMPLETED');
  return id;
}

const rejection = (promise: Promise<unknown>) =>
  promise.then(
    () => {
      throw new Error('expected a rejection');
    },
    (error: unknown) => error as OrqError,
  );

describe('deleting a session', () => {
  it('deletes a finished session, every key of it, its index entry and its idempotency key', async () => {
    const { client } = await startCluster({});
    const id = await completed(client, { idempotencyKey: 'nightly-1' });
    const kept = await completed(client);
    expect((await keysOf(client, id)).length).toBeGreaterThanOrEqual(6);

    expect(await client.delete(id)).toEqual({ sessionId: id, state: 'COMPLETED' });

    expect(await keysOf(client, id)).toEqual([]);
    // Only a mark is left, which refuses a create of the id for a day (see below), then goes.
    expect(await markTtl(client, id)).toBeGreaterThan(86_400 - 60);
    expect(await markTtl(client, kept)).toBe(-2);
    const redis = client.store.redis;
    expect(await redis.zscore(sessionIndexKey(client.store.prefix), id)).toBeNull();
    expect(await redis.exists(idempotencyKey(client.store.prefix, 'nightly-1'))).toBe(0);
    expect((await client.list()).map((s) => s.id)).toEqual([kept]);
    expect((await rejection(client.get(id))).code).toBe('NOT_FOUND');
    // The other session is untouched.
    expect((await client.get(kept)).session.state).toBe('COMPLETED');
    // The key is free again: the same key starts a new session.
    const again = await client.submit({ instruction: 'do A then B', idempotencyKey: 'nightly-1' });
    expect(again.id).not.toBe(id);
    // A second delete finds nothing.
    expect((await rejection(client.delete(id))).code).toBe('NOT_FOUND');
  });

  it('refuses a session that is not finished, and deletes it once cancelled', async () => {
    // No planner: the session stays PLANNING until it is cancelled.
    const { client } = await startCluster({ roles: ['coordinator'] });
    const { id } = await client.submit({ instruction: 'wait for a planner' });
    const refused = await rejection(client.delete(id));
    expect(refused).toBeInstanceOf(OrqError);
    expect(refused.code).toBe('INVALID_STATE');
    expect(refused.message).toContain(`session ${id} is PLANNING`);
    expect(refused.hint).toContain(`orq cancel ${id}`);
    expect((await keysOf(client, id)).length).toBeGreaterThan(0);
    expect((await client.get(id)).session.state).toBe('PLANNING');

    await client.cancel(id);
    await eventually(
      async () => ((await client.get(id)).session.state === 'CANCELLED' ? true : undefined),
      'the session to be cancelled',
    );
    expect(await client.delete(id)).toEqual({ sessionId: id, state: 'CANCELLED' });
    expect(await keysOf(client, id)).toEqual([]);
  });

  it('names a malformed id as such', async () => {
    const { client } = await startCluster({ pods: 0 });
    expect((await rejection(client.delete('no spaces allowed'))).code).toBe('VALIDATION_FAILED');
  });

  it('brings nothing back: late events, usage settlements and agent steps write no key', async () => {
    const cluster = await startCluster({});
    const { client } = cluster;
    const id = await completed(client);
    await client.delete(id);

    const entry = {
      type: 'decision' as const,
      decision: 'event:ignored',
      reason: 'late',
      inputs: {},
    };
    // The coordinator's one write path refuses a session without a record.
    const applied = await client.store.apply(id, { eventId: 'late-event', history: [entry] });
    expect(applied.status).toBe('GONE');
    // A model call that was in flight when the session ended reserves and settles nothing.
    const usage = new UsageStore(client.store.redis, client.store.prefix);
    const reserved = await usage.reserve(
      id,
      { tokens: 100, usdMicros: 0 },
      { maxTokens: 1000 },
      60_000,
    );
    expect(reserved.granted).toBe(true);
    await usage.settle(id, {
      reserved: { tokens: 100, usdMicros: 0 },
      role: 'worker',
      taskId: 'A',
      usage: { inputTokens: 10, outputTokens: 5 },
      usdMicros: 0,
    });
    // An agent run still in flight records no step.
    expect(await client.store.appendTaskStep(id, 'A', 1, 0, entry)).toBe('GONE');
    // A coordinator event that arrives after the delete fails once and writes nothing.
    const queue = cluster.pods[0]!.queues.get('coordinator');
    const job = await queue.add('cancel', { sessionId: id, reason: 'late cancel' });
    await eventually(
      async () => ((await job.isFailed()) || (await job.isCompleted()) ? true : undefined),
      'the late event to be processed',
    );
    expect(await keysOf(client, id)).toEqual([]);
  });
});

/**
 * Holds the connection's calls of `names` until `until` settles; the promise returned settles
 * when the first of them is called.
 */
function holdCalls(redis: Redis, names: string[], until: Promise<void>): Promise<void> {
  return new Promise((reached) => {
    const commands = redis as unknown as Record<string, (...args: unknown[]) => Promise<unknown>>;
    for (const name of names) {
      const original = commands[name]!.bind(redis);
      commands[name] = async (...args: unknown[]) => {
        reached();
        await until;
        return original(...args);
      };
    }
  });
}

describe('a submit racing the delete of the session its idempotency key names', () => {
  it('starts a new session and brings the deleted one back under no circumstances', async () => {
    const { client, prefix } = await startCluster({});
    const request = {
      instruction: 'do A then B',
      config: { llm: { scenario: aThenB } },
      idempotencyKey: 'nightly-2',
    };
    const id = await completed(client, { idempotencyKey: 'nightly-2' });
    // The delete runs on a connection of its own, as in another process. Its script (every key
    // of the session) runs between the submit's claim of the key and its read of the session;
    // the rest (releasing the key, dropping the index entry) waits until the submit is done:
    // the order that re-created the session after its delete had dropped its index entry.
    const redis = new Redis(inject('redisUrl'));
    const deleter = new SessionStore(redis, prefix);
    await deleteSession(deleter, 'no-such-session'); // defines the delete's scripts
    let submitted!: () => void;
    const done = new Promise<void>((resolve) => (submitted = resolve));
    const held = holdCalls(redis, ['orqReleaseIdempotencyKey', 'zrem'], done);
    const load = client.store.loadSession.bind(client.store);
    let deleting: Promise<unknown> | undefined;
    vi.spyOn(client.store, 'loadSession').mockImplementationOnce(async (sessionId) => {
      expect(sessionId).toBe(id);
      deleting = deleteSession(deleter, sessionId);
      await held;
      return load(sessionId);
    });
    try {
      const outcome = await client.submitWithOutcome(request);
      submitted();
      expect(await deleting).toEqual({ status: 'DELETED', state: 'COMPLETED' });

      expect(outcome.created).toBe(true);
      expect(outcome.session.id).not.toBe(id);
      // The deleted session stays deleted: no key but the delete's mark, no index entry.
      expect(await keysOf(client, id)).toEqual([]);
      expect(await markTtl(client, id)).toBeGreaterThan(0);
      expect((await rejection(client.get(id))).code).toBe('NOT_FOUND');
      const store = client.store.redis;
      expect(await store.zscore(sessionIndexKey(prefix), id)).toBeNull();
      // The new one holds the key, is listed and runs, as after a submit that came after the delete.
      expect(await store.get(idempotencyKey(prefix, 'nightly-2'))).toBe(outcome.session.id);
      expect((await client.list()).map((s) => s.id)).toEqual([outcome.session.id]);
      const view = await client.wait(outcome.session.id, { timeoutMs: 20_000 });
      expect(view.session.state).toBe('COMPLETED');
      expect(await client.submitWithOutcome(request)).toMatchObject({
        created: false,
        session: { id: outcome.session.id },
      });
    } finally {
      submitted();
      redis.disconnect();
    }
  });

  it('gives up after a few tries that each find the session deleted, with a CONFLICT', async () => {
    const { client, prefix } = await startCluster({ pods: 0 });
    const deleted = { ...makeSession(), state: 'COMPLETED' as const, idempotencyKey: 'nightly-3' };
    await client.store.apply(deleted.id, {
      eventId: `submit|${deleted.id}`,
      session: { record: deleted, expectedVersion: 0 },
    });
    expect(await client.delete(deleted.id)).toMatchObject({ state: 'COMPLETED' });
    // As if, each time the submit claims the key, another submit and a delete had just been
    // through it: the key names a session already deleted.
    vi.spyOn(client.store, 'claimIdempotencyKey').mockResolvedValue(deleted.id);

    const refused = await rejection(
      client.submit({ instruction: 'Write the notes', idempotencyKey: 'nightly-3' }),
    );
    expect(refused).toBeInstanceOf(OrqError);
    expect(refused.code).toBe('CONFLICT');
    expect(refused.message).toContain('idempotency key "nightly-3"');
    expect(refused.hint).toContain('Retry the submit');
    expect(client.store.claimIdempotencyKey).toHaveBeenCalledTimes(3);
    expect(await keysOf(client, deleted.id)).toEqual([]);
    expect(await client.store.redis.zscore(sessionIndexKey(prefix), deleted.id)).toBeNull();
  });
});

describe('pruning sessions', () => {
  it('deletes the finished sessions idle longer than the age asked, and only those', async () => {
    const { client, prefix } = await startCluster({ config: { queues: { attempts: 1 } } });
    const [a, b] = [await completed(client), await completed(client)];
    const settled = async (scenario: string) => {
      const { id } = await client.submit({
        instruction: 'do A then B',
        config: { llm: { scenario } },
      });
      return { id, state: (await client.wait(id, { timeoutMs: 20_000 })).session.state };
    };
    const failed = await settled(scenarios.write('planner-down', { plans: [{ error: 'down' }] }));
    expect(failed.state).toBe('FAILED');
    const blocked = await settled(
      scenarios.write('worker-down', {
        ...A_THEN_B,
        tasks: { A: { results: [{ error: 'down' }] } },
      }),
    );
    expect(blocked.state).toBe('BLOCKED');
    // A left-over index entry of a session already gone.
    await client.store.redis.zadd(sessionIndexKey(prefix), 1, 'gone-session');
    await new Promise((r) => setTimeout(r, 20));

    // Nothing idle for an hour; the left-over entry is dropped all the same.
    expect(await client.prune({ olderThanSeconds: 3600 })).toEqual({
      dryRun: false,
      deleted: [],
      unindexed: 1,
    });
    expect(await client.store.redis.zscore(sessionIndexKey(prefix), 'gone-session')).toBeNull();
    const dry = await client.prune({ olderThanSeconds: 0, dryRun: true });
    expect(dry.dryRun).toBe(true);
    expect(dry.deleted.sort()).toEqual([a, b, failed.id].sort());
    expect((await keysOf(client, a)).length).toBeGreaterThan(0);

    expect(await client.prune({ olderThanSeconds: 0, states: ['FAILED'] })).toEqual({
      dryRun: false,
      deleted: [failed.id],
      unindexed: 0,
    });
    expect(await keysOf(client, failed.id)).toEqual([]);

    const report = await client.prune({ olderThanSeconds: 0 });
    expect(report).toEqual({ dryRun: false, deleted: expect.any(Array), unindexed: 0 });
    expect(report.deleted.sort()).toEqual([a, b].sort());
    expect(await keysOf(client, a)).toEqual([]);
    expect(await keysOf(client, b)).toEqual([]);
    // BLOCKED waits for a resume: never pruned.
    expect((await client.get(blocked.id)).session.state).toBe('BLOCKED');
    expect((await client.list()).map((s) => s.id)).toEqual([blocked.id]);
  });

  it('refuses a prune that names an unfinished state', async () => {
    const { client } = await startCluster({ pods: 0 });
    const refused = await rejection(
      client.prune({ olderThanSeconds: 0, states: ['RUNNING' as never] }),
    );
    expect(refused.code).toBe('VALIDATION_FAILED');
    expect(refused.message).toContain('only finished sessions can be pruned');
  });
});

describe('retention.deleteFinishedAfterSeconds', () => {
  it('has coordinator pods delete finished sessions once idle that long, and keep the others', async () => {
    const { client } = await startCluster({
      config: {
        queues: { attempts: 1 },
        retention: { deleteFinishedAfterSeconds: 1, sweepIntervalSeconds: 1 },
      },
    });
    const id = await completed(client);
    const { id: blocked } = await client.submit({
      instruction: 'do A then B',
      config: {
        llm: {
          scenario: scenarios.write('blocks', {
            ...A_THEN_B,
            tasks: { A: { results: [{ error: 'down' }] } },
          }),
        },
      },
    });
    expect((await client.wait(blocked, { timeoutMs: 20_000 })).session.state).toBe('BLOCKED');
    await eventually(
      async () => ((await keysOf(client, id)).length === 0 ? true : undefined),
      'the finished session to be deleted',
    );
    expect((await rejection(client.get(id))).code).toBe('NOT_FOUND');
    expect((await client.get(blocked)).session.state).toBe('BLOCKED');
  });
});
