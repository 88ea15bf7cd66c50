import type { Queue } from 'bullmq';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { settlesWithin } from '../../src/shared/settles-within.js';
import { markRequestPending } from '../../src/shared/store/pending-resumes.js';
import { deleteSession, pruneSessions } from '../../src/shared/store/session-retention.js';
import { bullQueue } from '../support/pods.js';
import { startCluster, type TestCluster } from '../support/cluster.js';
import { moveSession } from '../support/session-state.js';

// No roles: no coordinator takes a resume's job off the queue, and the tests move sessions.
// A prefix per test: a prune looks at every session of its prefix.
let cluster: TestCluster;
let coordinatorQueue: Queue;

beforeEach(async () => {
  cluster = await startCluster({ pods: 0 });
  coordinatorQueue = bullQueue(cluster.client.store.redis, cluster.prefix, 'coordinator');
}, 30_000);

afterEach(async () => {
  await coordinatorQueue?.close();
  await cluster?.close();
});

const pause = (ms: number) => new Promise((r) => setTimeout(r, ms));
const RAISE = { budget: { maxTokens: 1_000_000 } };

/** A session stopped by its budget, as the coordinator leaves one. */
async function budgetExhausted(): Promise<string> {
  const { id } = await cluster.client.submit({ instruction: 'stopped by its budget' });
  await moveSession(cluster.client, id, 'BUDGET_EXHAUSTED');
  return id;
}

/** A retention cutoff strictly after what the test did so far and before what it does next. */
async function cutoffHere(): Promise<number> {
  await pause(5);
  const cutoffMs = Date.now();
  await pause(5);
  return cutoffMs;
}

const keysOf = async (sessionId: string) =>
  (await cluster.client.store.redis.keys(`${cluster.prefix}:s:{${sessionId}}:*`)).filter(
    (key) => key !== cluster.client.store.keys(sessionId).deleted,
  );

/** The resume records of the session: event id → enqueued-at ms. */
const recordsOf = (sessionId: string) =>
  cluster.client.store.redis.hgetall(cluster.client.store.keys(sessionId).resumes);

/** The event ids of the resume jobs of the session on the coordinator's queue. */
async function resumeJobsOf(sessionId: string): Promise<string[]> {
  const jobs = await coordinatorQueue.getJobs(['waiting', 'delayed', 'prioritized']);
  return jobs
    .filter((job) => job.name === 'resume' && job.data.sessionId === sessionId)
    .map((job) => job.id ?? '');
}

type Commands = Record<string, (...args: unknown[]) => Promise<unknown>>;

/**
 * Runs `between` once, just before the first session delete script runs: what happens between
 * a prune's read and its delete.
 */
async function beforeFirstDelete(between: () => Promise<unknown>) {
  const { store } = cluster.client;
  const redis = store.redis as unknown as Commands;
  let ran = false;
  // Defines the delete script, which is then wrapped.
  expect(await deleteSession(store, 'no-such-session')).toEqual({ status: 'NOT_FOUND' });
  const remove = redis.orqDeleteSession!;
  redis.orqDeleteSession = async (...args: unknown[]) => {
    if (!ran) {
      ran = true;
      await between();
    }
    return remove.apply(store.redis, args);
  };
  return { ran: () => ran, restore: () => (redis.orqDeleteSession = remove) };
}

describe('retention and a resume not applied yet', () => {
  it('keeps a BUDGET_EXHAUSTED session whose resume was enqueued since the cutoff, and not an older one', async () => {
    const { client } = cluster;
    const [resumed, idle] = [await budgetExhausted(), await budgetExhausted()];
    const cutoffMs = await cutoffHere();
    // Its history is older than the cutoff; the resume asked for since wrote none.
    await client.resume(resumed, RAISE, { waitMs: 0 });
    expect(await client.resumePending(resumed)).toBe(true);

    const dry = await pruneSessions(client.store, { cutoffMs, dryRun: true });
    expect(dry.deleted).toEqual([idle]);
    expect(await pruneSessions(client.store, { cutoffMs })).toEqual({
      dryRun: false,
      deleted: [idle],
      unindexed: 0,
    });
    expect((await client.get(resumed)).session.state).toBe('BUDGET_EXHAUSTED');
    expect(await client.resumePending(resumed)).toBe(true);

    // A cutoff past the resume: a record whose job never runs does not keep it for ever.
    await pause(5);
    expect(await pruneSessions(client.store, { cutoffMs: Date.now() })).toMatchObject({
      deleted: [resumed],
    });
    expect(await keysOf(resumed)).toEqual([]);
  });

  it('does not count a resume the coordinator applied already', async () => {
    const { client } = cluster;
    const id = await budgetExhausted();
    const cutoffMs = await cutoffHere();
    const keys = client.store.keys(id);
    await markRequestPending(client.store, id, `resume|${id}|applied`);
    await client.store.redis.sadd(keys.applied, `resume|${id}|applied`);
    expect(await pruneSessions(client.store, { cutoffMs })).toMatchObject({ deleted: [id] });
    expect(await keysOf(id)).toEqual([]);
  });

  it("checks again in the prune's delete: keeps a session resumed between the prune's read and its delete", async () => {
    const { client } = cluster;
    const id = await budgetExhausted();
    const cutoffMs = await cutoffHere();
    const hook = await beforeFirstDelete(() => client.resume(id, RAISE, { waitMs: 0 }));
    try {
      const report = await pruneSessions(client.store, { cutoffMs, states: ['BUDGET_EXHAUSTED'] });
      expect(hook.ran()).toBe(true);
      // Kept, and simply not reported: it is no longer idle.
      expect(report).toEqual({ dryRun: false, deleted: [], unindexed: 0 });
    } finally {
      hook.restore();
    }
    expect((await client.get(id)).session.state).toBe('BUDGET_EXHAUSTED');
    expect(await client.resumePending(id)).toBe(true);
    expect((await client.list()).map((s) => s.id)).toContain(id);

    // A person's delete goes regardless: they asked for it.
    expect(await client.delete(id)).toEqual({ sessionId: id, state: 'BUDGET_EXHAUSTED' });
    expect(await keysOf(id)).toEqual([]);
  });

  it("also keeps a session whose history moved between the prune's read and its delete", async () => {
    const { client } = cluster;
    const id = await budgetExhausted();
    const cutoffMs = await cutoffHere();
    // As a resume applied, and the session stopped by its budget again, in between.
    const hook = await beforeFirstDelete(() =>
      client.store.apply(id, {
        eventId: `test-moved|${id}`,
        history: [{ type: 'decision', decision: 'resume:budget', reason: 'test', inputs: {} }],
      }),
    );
    try {
      expect(await pruneSessions(client.store, { cutoffMs })).toMatchObject({ deleted: [] });
    } finally {
      hook.restore();
    }
    expect(hook.ran()).toBe(true);
    expect((await client.get(id)).session.state).toBe('BUDGET_EXHAUSTED');
  });
});

describe('records of resumes whose jobs are gone', () => {
  it('resumePending and watch drop the record of a removed job, and keep the one of a queued job', async () => {
    const { client } = cluster;
    const id = await budgetExhausted();
    await client.resume(id, RAISE, { waitMs: 0 });
    await client.resume(id, RAISE, { waitMs: 0 });
    const [gone, queued] = await resumeJobsOf(id);
    expect(Object.keys(await recordsOf(id)).sort()).toEqual([gone, queued].sort());
    await coordinatorQueue.remove(gone!);

    expect(await client.resumePending(id)).toBe(true);
    expect(Object.keys(await recordsOf(id))).toEqual([queued]);

    // The watch's polls look up what is left: a job that is still queued keeps its record.
    const waited = client.wait(id, { until: 'finished', timeoutMs: 1_000 });
    expect(await settlesWithin(waited, 700)).toBe(false);
    // Its resume waits for a coordinator: the session is not over, and the wait times out.
    await expect(waited).rejects.toMatchObject({ code: 'TIMEOUT' });
    expect(Object.keys(await recordsOf(id))).toEqual([queued]);

    await coordinatorQueue.remove(queued!);
    expect((await client.wait(id, { until: 'finished', timeoutMs: 5_000 })).session.state).toBe(
      'BUDGET_EXHAUSTED',
    );
    expect(await recordsOf(id)).toEqual({});
    expect(await client.resumePending(id)).toBe(false);
  });

  it('a watch drops the record of a job that is gone', async () => {
    const { client } = cluster;
    const id = await budgetExhausted();
    await client.resume(id, RAISE, { waitMs: 0 });
    const [gone] = await resumeJobsOf(id);
    await coordinatorQueue.remove(gone!);
    expect((await client.wait(id, { until: 'finished', timeoutMs: 5_000 })).session.state).toBe(
      'BUDGET_EXHAUSTED',
    );
    expect(await recordsOf(id)).toEqual({});
  });
});

describe('a resume whose record could not be written', () => {
  it('takes its queued job back, so a retry of the call does not queue a second resume', async () => {
    const { client } = cluster;
    const id = await budgetExhausted();
    // Defines the mark script, which the resume below then finds failing once.
    await markRequestPending(client.store, id, `resume|${id}|defined`);
    await client.store.redis.del(client.store.keys(id).resumes);
    const redis = client.store.redis as unknown as Commands;
    const mark = redis.orqMarkResume!;
    redis.orqMarkResume = () => Promise.reject(new Error('lost the mark'));
    try {
      await expect(client.resume(id, RAISE, { waitMs: 0 })).rejects.toThrow('lost the mark');
    } finally {
      redis.orqMarkResume = mark;
    }
    expect(await resumeJobsOf(id)).toEqual([]);

    await client.resume(id, RAISE, { waitMs: 0 });
    const jobs = await resumeJobsOf(id);
    expect(jobs).toHaveLength(1);
    expect(Object.keys(await recordsOf(id))).toEqual(jobs);
  });
});

describe('a cancel not applied yet', () => {
  it('keeps a wait going through the BLOCKED state from before it, until a coordinator applies it', async () => {
    const { client } = cluster;
    const { id } = await client.submit({ instruction: 'stops for a person' });
    await moveSession(client, id, 'BLOCKED');
    await client.cancel(id, 'not needed any more');
    expect(await client.requestPending(id)).toBe(true);
    // Not a resume: what the CLI says is waiting depends on it.
    expect(await client.resumePending(id)).toBe(false);
    // A wait right after the cancel ended at BLOCKED, as if the session had stopped for a person.
    await expect(client.wait(id, { timeoutMs: 300 })).rejects.toMatchObject({
      code: 'TIMEOUT',
      details: { state: 'BLOCKED' },
    });

    await cluster.startPod(['coordinator']);
    expect((await client.wait(id, { timeoutMs: 10_000 })).session.state).toBe('CANCELLED');
    expect(await client.requestPending(id)).toBe(false);
  });
});
