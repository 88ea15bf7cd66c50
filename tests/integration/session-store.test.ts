import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { Queue } from 'bullmq';
import { SessionConfig } from '../../src/shared/config/schema.js';
import { Session } from '../../src/shared/domain/session.js';
import { Task } from '../../src/shared/domain/task.js';
import type { HistoryEntryDraft } from '../../src/shared/domain/history.js';
import { QueueSet } from '../../src/shared/queue-set.js';
import { bullPrefix, outboxJob } from '../../src/shared/queues.js';
import { CommandTally } from '../../bench/lib/command-counter.js';
import { applyArgs } from '../../src/shared/store/changeset-writer.js';
import type { Changeset } from '../../src/shared/store/session-records.js';
import { SessionStore } from '../../src/shared/store/session-store.js';
import { deleteSession } from '../../src/shared/store/session-retention.js';

const prefix = `ss${randomUUID().slice(0, 8)}`;
let redis: Redis;
let admin: Redis;
let store: SessionStore;

beforeAll(() => {
  redis = new Redis(inject('redisUrl'));
  admin = new Redis(inject('redisUrl'));
  store = new SessionStore(redis, prefix, 1000, () => new Date('2026-01-02T03:04:05.000Z'));
});
afterAll(() => {
  redis.disconnect();
  admin.disconnect();
});

const task = (id: string, extra: Partial<Task> = {}): Task =>
  Task.parse({ id, title: `Task ${id}`, acceptance: `${id} is done`, ...extra });

function sessionRecord(id: string): Session {
  const now = new Date().toISOString();
  return Session.parse({
    id,
    instruction: 'write docs and add tests',
    state: 'RUNNING',
    createdAt: now,
    updatedAt: now,
    requiredTerms: { terms: ['docs'], source: 'user-input' },
    config: SessionConfig.parse({}),
    planning: {},
  });
}

/** A RUNNING session with `tasks`, all written by one apply. */
async function seed(tasks: Task[]): Promise<string> {
  const id = randomUUID();
  const result = await store.apply(id, {
    eventId: `seed|${id}`,
    session: { record: sessionRecord(id), expectedVersion: 0 },
    tasks: tasks.map((t) => ({ task: t, version: 0 })),
    counters: { open: tasks.length, active: 1 },
  });
  expect(result).toEqual({ status: 'OK', counters: { open: tasks.length, active: 1 } });
  return id;
}

/** The commands `connection` sends while `fn` runs, by name (scripts by their name). */
async function commandsDuring(
  connection: Redis,
  fn: () => Promise<unknown>,
): Promise<Record<string, number>> {
  const tally = new CommandTally();
  tally.attach(connection);
  tally.take();
  await fn();
  return tally.take();
}

describe('SessionStore.loadForTask', () => {
  it('reads the session state, counters and tasks with their versions in one script call', async () => {
    const id = await seed([task('a'), task('b')]);
    const connection = new Redis(inject('redisUrl'));
    const fresh = new SessionStore(connection, prefix);
    await fresh.loadForTask(randomUUID()); // connects and loads the script
    let read: Awaited<ReturnType<SessionStore['loadForTask']>> | undefined;
    const sent = await commandsDuring(connection, async () => {
      read = await fresh.loadForTask(id, ['a', 'missing', 'b']);
    });
    connection.disconnect();
    expect(sent).toEqual({ 'script:orqReadTasks': 1 });
    expect(read?.snapshot?.session.state).toBe('RUNNING');
    expect(read?.snapshot?.session.instruction).toBe('write docs and add tests');
    expect(read?.snapshot?.version).toBe(1);
    expect(read?.snapshot?.counters).toEqual({ open: 2, active: 1 });
    expect([...(read?.tasks.keys() ?? [])]).toEqual(['a', 'b']);
    expect(read?.tasks.get('a')).toEqual({ task: task('a'), version: 1 });
  });

  it('keeps the submit-time parts after the first read but always returns the current state', async () => {
    const id = await seed([task('a')]);
    expect((await store.loadForTask(id)).snapshot?.session.state).toBe('RUNNING');
    await admin.hset(store.keys(id).meta, 'state', 'CANCELLED');
    // The second read asks the script for the state only, not for the record again.
    const asked: string[] = [];
    const script = redis.orqReadTasks.bind(redis);
    redis.orqReadTasks = ((...args: Parameters<typeof script>) => {
      // After the six keys: whether the record is asked for.
      asked.push(String(args[0][6]));
      return script(...args);
    }) as typeof script;
    try {
      expect((await store.loadForTask(id)).snapshot?.session.state).toBe('CANCELLED');
    } finally {
      redis.orqReadTasks = script;
    }
    expect(asked).toEqual(['0']);
  });

  it('finds no session for an unknown id, and requireForTask says NOT_FOUND', async () => {
    expect((await store.loadForTask(randomUUID(), ['a'])).snapshot).toBeUndefined();
    await expect(store.requireForTask(randomUUID())).rejects.toMatchObject({ code: 'NOT_FOUND' });
  });

  it('loads thousands of tasks (more than one script call can unpack) in order', async () => {
    const ids = Array.from({ length: 10_000 }, (_, i) => `t${String(i).padStart(5, '0')}`);
    const id = await seed(ids.map((t) => task(t)));
    const tasks = await store.loadTasks(id, ids);
    expect(tasks.size).toBe(10_000);
    expect([...tasks.keys()]).toEqual(ids);
    expect(tasks.get('t09999')?.task.title).toBe('Task t09999');
  });
});

describe('SessionStore.loadTasksInOrder', () => {
  it('with a cache reads again only the tasks written since, in the order asked', async () => {
    const id = await seed([task('a'), task('b'), task('c')]);
    const cache = new Map();
    const first = await store.loadTasksInOrder(id, ['c', 'a', 'missing', 'b'], cache);
    expect(first.map((t) => t.id)).toEqual(['c', 'a', 'b']);
    expect([...cache.keys()].sort()).toEqual(['a', 'b', 'c']);

    // b is written (its version moves on); a's record is changed behind the store's back,
    // version and all kept: a read that trusts the versions does not see it.
    const applied = await store.apply(id, {
      eventId: `b-runs|${id}`,
      tasks: [{ task: task('b', { state: 'RUNNING', attempts: 1 }), version: 1 }],
    });
    expect(applied.status).toBe('OK');
    const keys = store.keys(id);
    await admin.hset(keys.tasks, 'a', JSON.stringify(task('a', { title: 'changed unseen' })));

    const second = await store.loadTasksInOrder(id, ['c', 'a', 'b'], cache);
    expect(second.map((t) => [t.id, t.state, t.title])).toEqual([
      ['c', 'READY', 'Task c'],
      ['a', 'READY', 'Task a'],
      ['b', 'RUNNING', 'Task b'],
    ]);
    expect(cache.get('b')?.version).toBe(2);
    // Without the cache every record is read.
    const uncached = await store.loadTasksInOrder(id, ['a']);
    expect(uncached[0]?.title).toBe('changed unseen');
  });

  it('with a cache drops tasks gone from Redis or from the list asked, and shares only frozen records', async () => {
    const id = await seed([task('a'), task('b'), task('c')]);
    const cache = new Map();
    const [a] = await store.loadTasksInOrder(id, ['a', 'b', 'c'], cache);
    expect(Object.isFrozen(a)).toBe(true);
    expect(() => {
      (a as { title: string }).title = 'changed by a caller';
    }).toThrow(TypeError);
    // c gone from Redis, b no longer asked for (as a replan takes ids out of the session's list).
    const keys = store.keys(id);
    await admin.hdel(keys.tasks, 'c');
    await admin.hdel(keys.taskVersions, 'c');
    const read = await store.loadTasksInOrder(id, ['a', 'c'], cache);
    expect(read.map((t) => [t.id, t.title])).toEqual([['a', 'Task a']]);
    expect([...cache.keys()]).toEqual(['a']);
  });

  it('does not put back a record older than the one cached (a concurrent read got there first)', async () => {
    const id = await seed([task('a')]);
    // As if a concurrent call had read a's next version already.
    const newer = { task: task('a', { state: 'RUNNING', attempts: 1 }), version: 2 };
    const cache = new Map([['a', newer]]);
    const read = await store.loadTasksInOrder(id, ['a'], cache);
    expect(read[0]?.state).toBe('RUNNING');
    expect(cache.get('a')).toBe(newer);
  });
});

describe('SessionStore.apply', () => {
  it('writes tasks, counters, outbox and history in order and marks the event applied', async () => {
    const id = await seed([task('a')]);
    const job = outboxJob('work', 'execute', `x|${id}`, { sessionId: id, taskId: 'a', attempt: 1 });
    const changeset: Changeset = {
      eventId: 'e1',
      requireStates: ['PLANNING', 'RUNNING'],
      tasks: [{ task: task('a', { state: 'RUNNING', attempts: 1 }), version: 1 }],
      counters: { active: 1 },
      outbox: [job],
      history: [
        {
          type: 'state_change',
          entity: 'task',
          taskId: 'a',
          from: 'READY',
          to: 'RUNNING',
          reason: 'r1',
        },
        { type: 'decision', decision: 'd', reason: 'r2', inputs: {} },
      ],
    };
    expect(await store.apply(id, changeset)).toEqual({
      status: 'OK',
      counters: { open: 1, active: 2 },
    });
    expect((await store.loadTask(id, 'a'))?.version).toBe(2);
    expect((await store.loadTask(id, 'a'))?.task.state).toBe('RUNNING');
    expect(await store.readOutbox(id)).toEqual([job]);
    const history = (await store.history(id)).map((h) => h.entry);
    expect(history.slice(-2)).toMatchObject([
      { type: 'state_change', reason: 'r1', sessionId: id, timestamp: '2026-01-02T03:04:05.000Z' },
      { type: 'decision', reason: 'r2', sessionId: id },
    ]);
    // The same event again changes nothing.
    expect((await store.apply(id, changeset)).status).toBe('DUPLICATE');
    expect((await store.loadTask(id, 'a'))?.version).toBe(2);
  });

  it('writes 40,000 tasks in one apply (more arguments than a spread call can take)', async () => {
    // A plan of 20,000 tasks once failed its acceptance with "Maximum call stack size exceeded".
    const ids = Array.from({ length: 40_000 }, (_, i) => `t${i}`);
    const id = await seed(ids.map((t) => task(t)));
    expect((await store.loadTask(id, 't39999'))?.task.title).toBe('Task t39999');
  });

  it('refuses a stale task version, a wrong state, unexpected counters and a stale session', async () => {
    const id = await seed([task('a'), task('b')]);
    const stale = await store.apply(id, {
      eventId: 'stale-task',
      tasks: [{ task: task('a', { attempts: 1 }), version: 0 }],
    });
    expect(stale.status).toBe('CONFLICT');
    const staleRead = await store.apply(id, {
      eventId: 'stale-read',
      tasks: [{ task: task('a', { attempts: 1 }), version: 1 }],
      readTasks: [{ task: task('b'), version: 7 }],
    });
    expect(staleRead.status).toBe('CONFLICT');
    expect((await store.apply(id, { eventId: 'state', requireStates: ['PLANNING'] })).status).toBe(
      'STATE',
    );
    expect(
      (await store.apply(id, { eventId: 'counters', requireCounters: { open: 0 } })).status,
    ).toBe('COUNTERS');
    expect(
      (await store.apply(id, { eventId: 'counters-ok', requireCounters: { open: 2, active: 1 } }))
        .status,
    ).toBe('OK');
    const session = await store.apply(id, {
      eventId: 'session',
      session: { record: sessionRecord(id), expectedVersion: 0 },
    });
    expect(session.status).toBe('CONFLICT');
    // None of the refused ones wrote anything.
    expect((await store.loadTask(id, 'a'))?.version).toBe(1);
    expect((await store.loadSession(id))?.version).toBe(1);
  });

  it('passes records and entries as they are: quotes, newlines and non-ASCII survive', async () => {
    const id = await seed([task('a')]);
    const title = 'say "hi"\n\tto 認証 and ,commas, and \\backslashes\\';
    expect(
      (
        await store.apply(id, {
          eventId: 'odd',
          tasks: [{ task: task('a', { title }), version: 1 }],
          history: [{ type: 'decision', decision: 'odd', reason: title, inputs: {} }],
        })
      ).status,
    ).toBe('OK');
    expect((await store.loadTask(id, 'a'))?.task.title).toBe(title);
    expect((await store.history(id)).at(-1)?.entry).toMatchObject({ reason: title });
  });
});

describe('fences of work deliveries', () => {
  const deliver = (id: string) =>
    store.loadForTask(id, ['a'], undefined, undefined, { taskId: 'a', attempt: 1 });
  const verdict = (id: string, eventId: string, fence: number): Changeset => ({
    eventId,
    requireStates: ['RUNNING'],
    tasks: [{ task: task('a', { state: 'DONE', attempts: 1 }), version: 1 }],
    fence: { taskId: 'a', attempt: 1, value: fence },
  });

  it('are taken one after the other with the task read, per task attempt', async () => {
    const id = await seed([task('a')]);
    expect((await deliver(id)).fence).toBe(1);
    expect((await deliver(id)).fence).toBe(2);
    expect(await store.currentFence(id, 'a', 1)).toBe(2);
    expect(await store.currentFence(id, 'a', 2)).toBe(0);
    // None for a session that does not exist: nothing is written for it.
    expect((await deliver('gone')).fence).toBeUndefined();
    expect(await admin.exists(store.keys('gone').fences)).toBe(0);
  });

  it('refuse a result whose delivery a later one superseded, and apply the latest one', async () => {
    const id = await seed([task('a')]);
    await deliver(id);
    await deliver(id);
    expect((await store.apply(id, verdict(id, 'stale', 1))).status).toBe('FENCED');
    expect((await store.loadTask(id, 'a'))?.version).toBe(1);
    expect((await store.apply(id, verdict(id, 'current', 2))).status).toBe('OK');
    // Applied again (the event delivered twice): a duplicate, not refused.
    expect((await store.apply(id, verdict(id, 'current', 2))).status).toBe('DUPLICATE');
  });

  it('keep the long results they store apart, refuse a superseded one, and drop them all with the verdict', async () => {
    const id = await seed([task('a')]);
    const result = (output: string) => ({
      output,
      log: '',
      artifacts: [],
      tokenUsage: { inputTokens: 0, outputTokens: 0 },
      durationMs: 1,
    });
    await deliver(id);
    // The first delivery stores its result, then is paused past its lock; a second one runs.
    expect(await store.putResult(id, 'a', 1, result('early'), 1)).toBe('OK');
    await deliver(id);
    expect(await store.putResult(id, 'a', 1, result('current'), 2)).toBe('OK');
    // The paused delivery, running again, stores once more: refused, nothing written.
    expect(await store.putResult(id, 'a', 1, result('stale'), 1)).toBe('FENCED');
    expect((await store.loadResult(id, 'a', 1, 2))?.output).toBe('current');
    expect((await store.loadResult(id, 'a', 1, 1))?.output).toBe('early');
    // The current delivery's verdict is recorded: no stored result of the attempt is left.
    await store.dropResult(id, 'a', 1, 2);
    expect(await admin.hlen(store.keys(id).results)).toBe(0);
  });
});

describe('a deleted session', () => {
  const create = (id: string) =>
    store.apply(id, {
      eventId: `submit|${id}`,
      session: { record: { ...sessionRecord(id), state: 'COMPLETED' }, expectedVersion: 0 },
    });
  const keysOf = (id: string) => admin.keys(`${prefix}:s:{${id}}:*`);

  it('is not created again under its id: the create answers GONE and writes nothing', async () => {
    const id = randomUUID();
    expect((await create(id)).status).toBe('OK');
    expect(await deleteSession(store, id)).toEqual({ status: 'DELETED', state: 'COMPLETED' });
    // All that is left is a marker in the session's own slot, and it expires after a day.
    const marker = store.keys(id).deleted;
    expect(await keysOf(id)).toEqual([marker]);
    expect(await admin.ttl(marker)).toBeGreaterThan(86_400 - 60);
    expect(await admin.ttl(marker)).toBeLessThanOrEqual(86_400);

    // The very create of its first submit, as a submit that read the id before the delete sends.
    expect(await create(id)).toEqual({ status: 'GONE', counters: { open: 0, active: 0 } });
    expect(await store.loadSession(id)).toBeUndefined();
    expect(await keysOf(id)).toEqual([marker]);
    // Deleting it again finds nothing, marker or not.
    expect(await deleteSession(store, id)).toEqual({ status: 'NOT_FOUND' });
    expect(await keysOf(id)).toEqual([marker]);
  });
});

describe('SessionStore.writtenTasks', () => {
  it('gives the open tasks this store wrote, at their new versions, once the session was read', async () => {
    const id = await seed([task('a'), task('b')]);
    // The submit-time parts come from a read: before one, nothing is known.
    expect(store.writtenTasks(id, ['a'])).toBeUndefined();
    await store.loadForTask(id);
    expect(store.writtenTasks(id, ['a', 'b'])?.tasks).toEqual(
      new Map([
        ['a', { task: task('a'), version: 1 }],
        ['b', { task: task('b'), version: 1 }],
      ]),
    );
    const running = task('a', { state: 'RUNNING', attempts: 1 });
    const done = task('b', { state: 'DONE' });
    const applied = await store.apply(id, {
      eventId: 'move-on',
      tasks: [
        { task: running, version: 1 },
        { task: done, version: 1 },
      ],
    });
    expect(applied.status).toBe('OK');
    const written = store.writtenTasks(id, ['a']);
    expect(written?.session.instruction).toBe('write docs and add tests');
    expect(written?.tasks.get('a')).toEqual({ task: running, version: 2 });
    // What the store holds is what Redis holds.
    expect(await store.loadTask(id, 'a')).toEqual({ task: running, version: 2 });
    // A finished task is not kept: no verdict moves it again.
    expect(store.writtenTasks(id, ['b'])).toBeUndefined();
  });

  it('drops the copies a refused apply built on, and all of a session that moved on', async () => {
    const refused = await seed([task('a'), task('b')]);
    await store.loadForTask(refused);
    const stale = await store.apply(refused, {
      eventId: 'stale',
      tasks: [{ task: task('a', { attempts: 1 }), version: 0 }],
    });
    expect(stale.status).toBe('CONFLICT');
    expect(store.writtenTasks(refused, ['a'])).toBeUndefined();
    // One stale copy does not cost the others.
    expect(store.writtenTasks(refused, ['b'])?.tasks.get('b')?.version).toBe(1);
    const wrongState = await store.apply(refused, {
      eventId: 'state',
      requireStates: ['PLANNING'],
    });
    expect(wrongState.status).toBe('STATE');
    expect(store.writtenTasks(refused, ['b'])).toBeUndefined();

    const ended = await seed([task('a')]);
    await store.loadForTask(ended);
    expect(store.writtenTasks(ended, ['a'])).toBeDefined();
    const cancelled = await store.apply(ended, {
      eventId: 'cancel',
      session: { record: { ...sessionRecord(ended), state: 'CANCELLED' }, expectedVersion: 1 },
    });
    expect(cancelled.status).toBe('OK');
    expect(store.writtenTasks(ended, ['a'])).toBeUndefined();
  });
});

describe('applyArgs', () => {
  const stampOf = { sessionId: 's', timestamp: 'T', historyMaxLength: 9 };

  it('lays out the changeset as the script reads it', () => {
    const args = applyArgs(
      {
        eventId: 'e',
        requireStates: ['RUNNING', 'PLANNING'],
        tasks: [{ task: task('a'), version: 3 }],
        readTasks: [
          { task: task('a'), version: 3 },
          { task: task('b'), version: 5 },
        ],
        requireCounters: { open: 0 },
        counters: { open: -1 },
        history: [{ type: 'decision', decision: 'd', reason: 'r', inputs: {} }],
        unsettledUsage: [
          { role: 'judge', taskId: 'a', inputTokens: 7, outputTokens: 2, usdMicros: 0 },
        ],
      },
      stampOf,
    );
    expect(args.slice(0, 16)).toEqual([
      'e',
      'RUNNING,PLANNING',
      '',
      '',
      '',
      0,
      '',
      -1,
      0,
      9,
      '',
      2,
      1,
      0,
      1,
      1,
    ]);
    // Expected versions: the written task once, then the read-only one.
    expect(args.slice(16, 20)).toEqual(['a', 3, 'b', 5]);
    expect(args.slice(20, 23)).toEqual(['a', JSON.stringify(task('a')), 4]);
    expect(JSON.parse(String(args[23]))).toEqual({
      type: 'decision',
      decision: 'd',
      reason: 'r',
      inputs: {},
      timestamp: 'T',
      sessionId: 's',
    });
    expect(args.slice(24, 30)).toEqual(['judge', 'a', 7, 2, 0, '0']);
    // No slot limit; task a (READY, nothing to wait for) joins the ready set, path length 1.
    // No fence to check; no session record, so no integration phase.
    expect(args.slice(30)).toEqual(['', -1, '', '', '']);
    expect(args).toHaveLength(35);
    expect(applyArgs({ eventId: 'r', budgetRaised: true }, stampOf)[10]).toBe('1');
    const fenced = applyArgs(
      { eventId: 'f', fence: { taskId: 'a', attempt: 2, value: 3 } },
      stampOf,
    );
    expect(fenced.slice(-3, -1)).toEqual(['a|2', 3]);
  });

  it('stamps every history entry as one object with the stamp over its own keys', () => {
    const entries = [
      { type: 'decision', decision: 'd', reason: 'a "quoted" reason', inputs: { n: 1 } },
      { type: 'error', role: 'worker', code: 'X', message: 'm', timestamp: 'old', sessionId: 'x' },
      {},
    ] as unknown as HistoryEntryDraft[];
    const args = applyArgs({ eventId: 'e', history: entries }, stampOf);
    const stamped = args
      .slice(16, 16 + entries.length)
      .map((a) => JSON.parse(String(a)) as unknown);
    expect(stamped).toEqual(entries.map((e) => ({ ...e, timestamp: 'T', sessionId: 's' })));
  });
});

describe('the ready set and the slot limit', () => {
  const waiting = async (id: string) => admin.zrange(store.keys(id).ready, 0, -1, 'WITHSCORES');

  it('holds the READY tasks with nothing to wait for, longest path first, from every write', async () => {
    const id = await seed([
      task('a', { criticalPath: 1 }),
      task('b', { criticalPath: 3 }),
      task('c', { pendingDependencies: 1 }),
      task('r', { state: 'RUNNING' }),
    ]);
    expect(await waiting(id)).toEqual(['b', '-3', 'a', '-1']);
    const b = (await store.loadTask(id, 'b'))!;
    await store.apply(id, {
      eventId: 'dispatch-b',
      tasks: [{ task: { ...b.task, state: 'RUNNING' }, version: b.version }],
    });
    expect(await waiting(id)).toEqual(['a', '-1']);
  });

  it('refuses a write that passes the limit, or leaves a slot free while a task waits', async () => {
    // One task active (seed), a and b waiting.
    const id = await seed([task('a'), task('b'), task('r', { state: 'RUNNING' })]);
    const [a, b] = [(await store.loadTask(id, 'a'))!, (await store.loadTask(id, 'b'))!];
    const start = (...snapshots: (typeof a)[]) =>
      snapshots.map((s) => ({
        task: { ...s.task, state: 'RUNNING' as const },
        version: s.version,
      }));
    const tries = (eventId: string, tasks: ReturnType<typeof start>, slotLimit: number) =>
      store.apply(id, { eventId, tasks, counters: { active: tasks.length }, slotLimit });
    // Two more would make 3 of 2 slots.
    expect((await tries('over', start(a, b), 2)).status).toBe('CONFLICT');
    // One of 3 slots would stay free while b waits.
    expect((await tries('idle', start(a), 3)).status).toBe('CONFLICT');
    expect(await waiting(id)).toHaveLength(4);
    expect((await tries('fits', start(a), 2)).status).toBe('OK');
    expect(await waiting(id)).toEqual(['b', '-1']);
  });
});

describe('outbox in chunks', () => {
  it('adds and removes more jobs than one chunk holds', async () => {
    const id = await seed([task('a')]);
    const jobs = Array.from({ length: 2_345 }, (_, i) =>
      outboxJob('work', 'execute', `chunk|${id}|${i}`, {
        sessionId: id,
        taskId: 'a',
        attempt: i + 1,
      }),
    );
    const queues = new QueueSet(redis, prefix, {});
    try {
      await queues.addAll(jobs);
      const work = new Queue('work', { connection: admin, prefix: bullPrefix(prefix) });
      const waiting = await work.getJobCounts('waiting');
      expect(waiting.waiting).toBe(2_345);
      expect(await work.getJob(`chunk|${id}|2344`)).toMatchObject({ name: 'execute' });
      await work.close();
    } finally {
      await queues.close();
    }
    await admin.hset(
      store.keys(id).outbox,
      Object.fromEntries(jobs.map((j) => [j.jobId, JSON.stringify(j)])),
    );
    await store.removeFromOutbox(
      id,
      jobs.map((j) => j.jobId),
    );
    expect(await admin.hlen(store.keys(id).outbox)).toBe(0);
  });
});
