import type { Result } from 'ioredis';
import { defineScripts, type RedisConnection } from '../redis.js';
import { HistoryEntry, type HistoryEntryDraft } from '../domain/history.js';
import {
  FINISHED_SESSION_STATES,
  Session,
  SessionState,
  type SessionEnded,
} from '../domain/session.js';
import { FINISHED_TASK_STATES, isWaitingForSlot, Task, TaskResult } from '../domain/task.js';
import { waitingScore } from '../rules/critical-path.js';
import { OrqError } from '../errors.js';
import { fenceSuffix, OutboxJob, type UnsettledUsage } from '../queues.js';
import { APPLY_SCRIPT } from './apply-script.js';
import { chunked } from '../chunked.js';
import { WrittenTasks } from './written-tasks.js';
import { SessionIndex } from './session-index.js';
import { ADD_USAGE_LUA, unsettledUsageArgs } from './usage-store.js';
import {
  fenceField,
  idempotencyKey,
  sessionEndedChannel,
  sessionKeyList,
  sessionKeys,
  type SessionKeys,
} from './keys.js';

export interface Counters {
  /** Tasks not yet in a finished state. */
  open: number;
  /** Tasks dispatched to a worker or waiting for the Replanner. */
  active: number;
}

export interface SessionSnapshot {
  session: Session;
  version: number;
  counters: Counters;
}

export interface TaskSnapshot {
  task: Task;
  /** 0 when the task does not exist yet. */
  version: number;
}

/** Everything one transition changes, applied atomically by APPLY_SCRIPT. */
export interface Changeset {
  /** Deterministic id of the event; a second apply with the same id is a no-op. */
  eventId: string;
  /** Apply only while the session is in one of these states. */
  requireStates?: SessionState[];
  /** Replace the session record; requires its version to still be `expectedVersion`. */
  session?: { record: Session; expectedVersion: number };
  /** Task records to write, each with the version it had when read (0 = new). */
  tasks?: TaskSnapshot[];
  /** Versions that must be unchanged even though the task is not written. */
  readTasks?: TaskSnapshot[];
  requireCounters?: Partial<Counters>;
  counters?: Partial<Counters>;
  outbox?: OutboxJob[];
  history?: HistoryEntryDraft[];
  /** Model calls whose usage came with the event: counted by this write, so only once. */
  unsettledUsage?: readonly UnsettledUsage[];
  /**
   * The session's budget was raised (a resume after BUDGET_EXHAUSTED): its usage forgets the
   * refusal, and processes that keep the session's submit-time parts read the record again.
   */
  budgetRaised?: boolean;
  /**
   * The session's scheduling.maxTasksInFlight when this transition filled its slots: the write
   * is refused (CONFLICT) if it would leave more tasks active, or a slot free while a task
   * waits (APPLY_SCRIPT). Unset: no check (the transition dispatched nothing new).
   */
  slotLimit?: number;
  /**
   * The fence the work delivery behind this event took (keys.ts `fences`): the write is refused
   * (FENCED) if a later delivery of the task attempt took a higher one since.
   */
  fence?: { taskId: string; attempt: number; value: number };
}

export type ApplyStatus =
  'OK' | 'DUPLICATE' | 'STATE' | 'CONFLICT' | 'COUNTERS' | 'FENCED' | 'GONE';

export interface ApplyResult {
  status: ApplyStatus;
  counters: Counters;
}

export interface StoredHistoryEntry {
  /** Redis stream id, usable as a cursor. */
  id: string;
  entry: HistoryEntry;
}

declare module 'ioredis' {
  interface RedisCommander<Context> {
    /**
     * One array (ioredis flattens it): the ten keys (meta, tasks, taskVersions, outbox, applied,
     * history, usage, deleted, ready, fences), then applyArgs. A spread would put every argument on the call
     * stack, and a plan of 20,000 tasks has more than it holds.
     */
    orqApply(keysThenArgs: (string | number)[]): Result<[string, number, number], Context>;
    /** KEYS and ARGV as READ_TASKS_SCRIPT documents them (readTasksArgs). */
    orqReadTasks(keysThenArgs: (string | number)[]): Result<(string | null)[], Context>;
    orqReadChangedTasks(
      tasks: string,
      taskVersions: string,
      ...idsThenVersions: string[]
    ): Result<(string | null)[], Context>;
    orqAppendStep(
      steps: string,
      history: string,
      meta: string,
      countField: string,
      step: number,
      stepField: string,
      record: string,
      entry: string,
      historyMaxLength: number,
    ): Result<string, Context>;
    orqReleaseIdempotencyKey(key: string, sessionId: string): Result<number, Context>;
    orqPutResult(
      meta: string,
      results: string,
      fences: string,
      field: string,
      record: string,
      fenceField: string,
      fence: string,
    ): Result<string, Context>;
  }
}

/** Reads and writes orq's session state in Redis. Only the coordinator and producers write. */
export class SessionStore {
  /** Sessions as first read: only their submit-time parts are used (loadForTask). */
  private readonly fixedParts = new Map<string, { session: Session; rev: string }>();
  /** Open tasks as this process last wrote them (see writtenTasks). */
  private readonly written = new WrittenTasks(WRITTEN_TASKS_CACHE_SIZE);

  /** The sessions by creation time, all of them and per tenant. */
  readonly index: SessionIndex;

  constructor(
    readonly redis: RedisConnection,
    readonly prefix: string,
    private readonly historyMaxLength = 100_000,
    private readonly now: () => Date = () => new Date(),
  ) {
    this.index = new SessionIndex(redis, prefix);
    defineScripts(redis, {
      orqApply: [10, APPLY_SCRIPT],
      orqReadTasks: [6, READ_TASKS_SCRIPT],
      orqReadChangedTasks: [2, READ_CHANGED_TASKS_SCRIPT],
      orqAppendStep: [3, APPEND_STEP_SCRIPT],
      orqReleaseIdempotencyKey: [1, RELEASE_KEY_SCRIPT],
      orqPutResult: [3, PUT_RESULT_SCRIPT],
    });
  }

  keys(sessionId: string) {
    return sessionKeys(this.prefix, sessionId);
  }

  async loadSession(sessionId: string): Promise<SessionSnapshot | undefined> {
    const [data, version, open, active] = await this.redis.hmget(
      this.keys(sessionId).meta,
      'data',
      'version',
      'open',
      'active',
    );
    if (!data) return undefined;
    return {
      session: Session.parse(JSON.parse(data)),
      version: Number(version ?? 0),
      counters: { open: Number(open ?? 0), active: Number(active ?? 0) },
    };
  }

  async requireSession(sessionId: string): Promise<SessionSnapshot> {
    const snapshot = await this.loadSession(sessionId);
    if (!snapshot) throw sessionNotFound(sessionId);
    return snapshot;
  }

  /**
   * The session and some of its tasks for task-level work, in one round trip (the hot path of
   * every role), without reading and parsing the whole session record each time (it grows with
   * the session: taskIds, plans). `state`, `version` and `counters` are current; every other
   * mutable field (planning, taskIds, updatedAt) may be stale: only what is fixed at submit (id,
   * instruction, config, requiredTerms) is safe to use. Session-level transitions must use
   * loadSession. Meant for a task or a few: loadTasks reads many in slices.
   *
   * `count`: usage passed on to the reader (the judge gets its execution's), counted by this
   * read of an existing session, once per `count.id` however often the read is repeated.
   *
   * `held`: versions of tasks the caller already has (a job's task card). A task still at that
   * version is not sent, only named in `unchanged`: a version check instead of a read.
   *
   * `fence`: a work delivery of that task attempt takes its fence (keys.ts `fences`) with this
   * read, so it costs no round trip of its own; `fence` in the reply (absent: no session).
   */
  async loadForTask(
    sessionId: string,
    taskIds: readonly string[] = [],
    count?: { id: string; usage: readonly UnsettledUsage[] },
    held?: ReadonlyMap<string, number>,
    fence?: { taskId: string; attempt: number },
  ): Promise<{
    snapshot: SessionSnapshot | undefined;
    tasks: Map<string, TaskSnapshot>;
    unchanged: Set<string>;
    fence?: number;
  }> {
    const keys = this.keys(sessionId);
    const cached = this.fixedParts.get(sessionId);
    const reply = await this.redis.orqReadTasks(
      readTasksArgs(
        keys,
        taskIds,
        cached ? '0' : '1',
        count?.usage.length ? count : undefined,
        held,
        fence && fenceField(fence.taskId, fence.attempt),
      ),
    );
    const [state, version, open, active, rev, data] = reply;
    const tasks = tasksFromReply(taskIds, reply.slice(6));
    const unchanged = new Set<string>();
    if (held) {
      taskIds.forEach((id, i) => {
        const current = reply[6 + taskIds.length + i];
        if (!tasks.has(id) && current && Number(current) === held.get(id)) unchanged.add(id);
      });
    }
    const taken = reply[6 + 2 * taskIds.length];
    const fenced = taken ? { fence: Number(taken) } : {};
    if (!state) return { snapshot: undefined, tasks, unchanged };
    const fixed = await this.fixedPartsOf(sessionId, rev ?? '0', cached, data);
    if (!fixed) return { snapshot: undefined, tasks, unchanged };
    return {
      snapshot: {
        session: { ...fixed, state: SessionState.parse(state) },
        version: Number(version ?? 0),
        counters: { open: Number(open ?? 0), active: Number(active ?? 0) },
      },
      tasks,
      unchanged,
      ...fenced,
    };
  }

  /**
   * The fence of the latest work delivery of a task attempt (0: none took one yet): which
   * delivery's hand-off a redelivery looks for before it runs the job again.
   */
  async currentFence(sessionId: string, taskId: string, attempt: number): Promise<number> {
    const value = await this.redis.hget(this.keys(sessionId).fences, fenceField(taskId, attempt));
    return Number(value ?? 0);
  }

  /**
   * The submit-time parts of a session: the cached ones while the config revision is the one
   * they were read at (a raised budget moves it on), else the record just read or read again.
   */
  private async fixedPartsOf(
    sessionId: string,
    rev: string,
    cached: { session: Session; rev: string } | undefined,
    data: string | null | undefined,
  ): Promise<Session | undefined> {
    if (cached && cached.rev === rev) return cached.session;
    const record = data ?? (await this.redis.hget(this.keys(sessionId).meta, 'data'));
    return record ? this.remember(sessionId, rev, record) : undefined;
  }

  /**
   * The coordinator's shortcut for a task transition, with no round trip: the session's
   * submit-time parts (as loadForTask keeps them; the budget may be older) and `taskIds` as this
   * process's last apply wrote them. Undefined unless every one is known. The session's state is
   * not known here, nor what another process wrote since: a changeset built on this must require
   * the session's state, and apply checks every task version, so a stale entry ends in STATE or
   * CONFLICT, after which the entries it built on are gone and the retry reads. A decision to
   * ignore an event must not rest on it.
   */
  writtenTasks(
    sessionId: string,
    taskIds: readonly string[],
  ): { session: Session; tasks: Map<string, TaskSnapshot> } | undefined {
    const session = this.fixedParts.get(sessionId)?.session;
    const tasks = session ? this.written.get(sessionId, taskIds) : undefined;
    return session && tasks ? { session, tasks } : undefined;
  }

  /** loadForTask for a session that must exist (NOT_FOUND otherwise). */
  async requireForTask(
    sessionId: string,
    taskIds: readonly string[] = [],
  ): Promise<{ snapshot: SessionSnapshot; tasks: Map<string, TaskSnapshot> }> {
    const { snapshot, tasks } = await this.loadForTask(sessionId, taskIds);
    if (!snapshot) throw sessionNotFound(sessionId);
    return { snapshot, tasks };
  }

  private remember(sessionId: string, rev: string, data: string): Session {
    const fixed = Session.parse(JSON.parse(data));
    if (this.fixedParts.size >= FIXED_PARTS_CACHE_SIZE && !this.fixedParts.has(sessionId)) {
      const oldest = this.fixedParts.keys().next().value;
      if (oldest !== undefined) this.fixedParts.delete(oldest);
    }
    this.fixedParts.set(sessionId, { session: fixed, rev });
    return fixed;
  }

  async loadTasks(
    sessionId: string,
    taskIds: readonly string[],
  ): Promise<Map<string, TaskSnapshot>> {
    if (taskIds.length === 0) return new Map();
    const keys = this.keys(sessionId);
    // Chunked: Lua's unpack() has a stack limit of a few thousand values.
    const chunks = chunked(taskIds, READ_CHUNK);
    const replies = await Promise.all(
      chunks.map((ids) => this.redis.orqReadTasks(readTasksArgs(keys, ids, '0'))),
    );
    const result = new Map<string, TaskSnapshot>();
    replies.forEach((reply, i) => {
      for (const [id, t] of tasksFromReply(chunks[i] ?? [], reply.slice(6))) result.set(id, t);
    });
    return result;
  }

  /**
   * The session's active count and up to `limit` of the tasks waiting for a slot, longest
   * critical path first: what a transition needs to fill the slots it frees. The apply checks
   * that both still hold (slotLimit), so a read racing a concurrent write is only retried.
   */
  async readSlots(
    sessionId: string,
    limit: number,
  ): Promise<{ active: number; waiting: TaskSnapshot[] }> {
    const keys = this.keys(sessionId);
    const [active, ids] = await Promise.all([
      this.redis.hget(keys.meta, 'active'),
      limit > 0 ? this.redis.zrange(keys.ready, 0, limit - 1) : Promise.resolve([] as string[]),
    ]);
    const loaded = await this.loadTasks(sessionId, ids);
    const waiting = ids.flatMap((id) => {
      const snapshot = loaded.get(id);
      return snapshot ? [snapshot] : [];
    });
    return { active: Number(active ?? 0), waiting };
  }

  async loadTask(sessionId: string, taskId: string): Promise<TaskSnapshot | undefined> {
    return (await this.loadTasks(sessionId, [taskId])).get(taskId);
  }

  /** All tasks in the session's creation order (for display, not for scheduling). */
  async loadAllTasks(sessionId: string): Promise<Task[]> {
    const snapshot = await this.loadSession(sessionId);
    if (!snapshot) return [];
    return this.loadTasksInOrder(sessionId, snapshot.session.taskIds);
  }

  /**
   * `taskIds` in that order, absent ones left out (for display, not for scheduling). With
   * `cache`, what an earlier call read, only the tasks written since are sent and parsed again
   * (their versions tell, in the same script, so each chunk is one moment as without a cache),
   * and the cache is brought up to date: a live view of a session of thousands of tasks read
   * every record several times a second. Cached tasks are frozen: callers share them.
   */
  async loadTasksInOrder(
    sessionId: string,
    taskIds: readonly string[],
    cache?: Map<string, TaskSnapshot>,
  ): Promise<Task[]> {
    const snapshots = cache
      ? await this.refreshTaskCache(sessionId, taskIds, cache)
      : await this.loadTasks(sessionId, taskIds);
    return taskIds.flatMap((id) => {
      const t = snapshots.get(id);
      return t ? [t.task] : [];
    });
  }

  /** Brings `cache` up to `taskIds` as they are now (see loadTasksInOrder); returns it. */
  private async refreshTaskCache(
    sessionId: string,
    taskIds: readonly string[],
    cache: Map<string, TaskSnapshot>,
  ): Promise<Map<string, TaskSnapshot>> {
    const keys = this.keys(sessionId);
    const chunks = chunked(taskIds, READ_CHUNK);
    const replies = await Promise.all(
      chunks.map((ids) =>
        this.redis.orqReadChangedTasks(
          keys.tasks,
          keys.taskVersions,
          ...ids,
          ...ids.map((id) => String(cache.get(id)?.version ?? '')),
        ),
      ),
    );
    replies.forEach((reply, c) => {
      (chunks[c] ?? []).forEach((id, i) => {
        const version = reply[2 * i];
        const record = reply[2 * i + 1];
        if (!version) cache.delete(id);
        // A concurrent call that read earlier must not put an older record back.
        else if (record && (cache.get(id)?.version ?? -1) < Number(version)) {
          cache.set(id, {
            task: deepFreeze(Task.parse(JSON.parse(record))),
            version: Number(version),
          });
        }
      });
    });
    // Ids a replan took out of the session's list are not shown again: not kept either.
    const listed = new Set(taskIds);
    for (const id of cache.keys()) if (!listed.has(id)) cache.delete(id);
    return cache;
  }

  async apply(sessionId: string, changeset: Changeset): Promise<ApplyResult> {
    const keys = this.keys(sessionId);
    const args = applyArgs(changeset, {
      sessionId,
      timestamp: this.now().toISOString(),
      historyMaxLength: this.historyMaxLength,
    });
    args.unshift(
      keys.meta,
      keys.tasks,
      keys.taskVersions,
      keys.outbox,
      keys.applied,
      keys.history,
      keys.usage,
      keys.deleted,
      keys.ready,
      keys.fences,
    );
    const [status, open, active] = await this.redis.orqApply(args);
    const ended = changeset.session?.record.state;
    const finished = ended !== undefined && FINISHED_SESSION_STATES.includes(ended);
    if (finished) this.written.forget(sessionId);
    else this.rememberWrites(sessionId, changeset, status as ApplyStatus);
    if (status === 'OK' && ended && finished) {
      await this.announceEnded({ sessionId, state: ended });
    }
    return {
      status: status as ApplyStatus,
      counters: { open: Number(open), active: Number(active) },
    };
  }

  /**
   * After an apply: OK keeps the open tasks it wrote, at their new versions. A refusal drops
   * what it built on (one stale copy must not cost the session's others); a change of the
   * session's state drops all of the session's copies.
   */
  private rememberWrites(sessionId: string, changeset: Changeset, status: ApplyStatus): void {
    const tasks = changeset.tasks ?? [];
    if (status === 'STATE' || status === 'COUNTERS' || status === 'GONE') {
      this.written.forget(sessionId);
    } else if (status !== 'OK') {
      for (const { task } of [...tasks, ...(changeset.readTasks ?? [])]) {
        this.written.drop(sessionId, task.id);
      }
    } else {
      for (const { task, version } of tasks) {
        // Finished tasks are not transitioned again by a verdict: no need to keep their results.
        if (FINISHED_TASK_STATES.includes(task.state)) this.written.drop(sessionId, task.id);
        else this.written.put(sessionId, { task, version: version + 1 });
      }
    }
  }

  /**
   * Tells every process that the session ended, so its model calls in flight stop now. Best
   * effort: a lost message (a Redis blip, a process not subscribed yet) is caught by the
   * processes' own polling of the session's state, only later.
   */
  private async announceEnded(message: SessionEnded): Promise<void> {
    await this.redis
      .publish(sessionEndedChannel(this.prefix), JSON.stringify(message))
      .catch(() => undefined);
  }

  /** Whether the session's budget refused a call and has not been raised since (usage-store.ts). */
  async budgetRefused(sessionId: string): Promise<boolean> {
    return (await this.redis.hexists(this.keys(sessionId).usage, 'exhausted')) === 1;
  }

  async readOutbox(sessionId: string): Promise<OutboxJob[]> {
    const raw = await this.redis.hvals(this.keys(sessionId).outbox);
    return raw.map((r) => OutboxJob.parse(JSON.parse(r)));
  }

  async removeFromOutbox(sessionId: string, jobIds: string[]): Promise<void> {
    // In slices: one HDEL of ten thousand ids is a write large enough to stall (ADD_BULK_CHUNK).
    for (const slice of chunked(jobIds, 1000)) {
      await this.redis.hdel(this.keys(sessionId).outbox, ...slice);
    }
  }

  async history(
    sessionId: string,
    options: { after?: string; count?: number } = {},
  ): Promise<StoredHistoryEntry[]> {
    const start = options.after ? `(${options.after}` : '-';
    const raw = options.count
      ? await this.redis.xrange(this.keys(sessionId).history, start, '+', 'COUNT', options.count)
      : await this.redis.xrange(this.keys(sessionId).history, start, '+');
    return raw.map(([id, fields]) => ({ id, entry: parseHistoryFields(fields) }));
  }

  /** The id of the session's newest history entry (a cursor for what comes next). */
  async lastHistoryId(sessionId: string): Promise<string | undefined> {
    const [last] = await this.redis.xrevrange(this.keys(sessionId).history, '+', '-', 'COUNT', 1);
    return last?.[0];
  }

  async indexSession(session: Session): Promise<void> {
    await this.index.add(session);
  }

  /** Drops the session's index entries; its tenant's too when `tenant` is known. */
  async unindexSession(sessionId: string, tenant?: string): Promise<void> {
    await this.index.remove(sessionId, tenant);
  }

  async listSessionIds(options: { limit?: number; offset?: number } = {}): Promise<string[]> {
    const page = await this.index.page({ limit: options.limit ?? 50, offset: options.offset ?? 0 });
    return page.map((entry) => entry.id);
  }

  /** Reserves an idempotency key for a session id; returns the id already holding it, if any. */
  async claimIdempotencyKey(key: string, sessionId: string): Promise<string | undefined> {
    const redisKey = idempotencyKey(this.prefix, key);
    const set = await this.redis.set(redisKey, sessionId, 'NX');
    if (set === 'OK') return undefined;
    return (await this.redis.get(redisKey)) ?? undefined;
  }

  /**
   * Frees an idempotency key, but only while it still names the session: once another submit
   * has claimed it again, the key is that submit's. Returns whether it was freed.
   */
  async releaseIdempotencyKey(key: string, sessionId: string): Promise<boolean> {
    const redisKey = idempotencyKey(this.prefix, key);
    return (await this.redis.orqReleaseIdempotencyKey(redisKey, sessionId)) === 1;
  }

  /**
   * Appends one step of an agent run inside a task (seed 004: plan, action, reflection,
   * revision) to the session history, exactly once per (taskId, attempt, step): a redelivered
   * job that writes a step again gets DUPLICATE and nothing is added. The steps are also kept
   * in the session's steps hash (one key per session, hash-tagged like the others), with the
   * plan current after a plan or revision, so a crashed run can resume from its last plan. The
   * only history write outside the coordinator: it touches no task or session state. GONE: the
   * session was deleted (a run still in flight), and nothing is written.
   */
  async appendTaskStep(
    sessionId: string,
    taskId: string,
    attempt: number,
    step: number,
    entry: HistoryEntryDraft,
    plan?: unknown,
  ): Promise<'OK' | 'DUPLICATE' | 'GONE'> {
    const stamped = HistoryEntry.parse({
      ...entry,
      taskId,
      timestamp: this.now().toISOString(),
      sessionId,
    });
    const record: TaskStepRecord = {
      step,
      entry: stamped,
      ...(plan === undefined ? {} : { plan }),
    };
    const status = await this.redis.orqAppendStep(
      this.keys(sessionId).steps,
      this.keys(sessionId).history,
      this.keys(sessionId).meta,
      stepCountField(taskId, attempt),
      step,
      `${stepCountField(taskId, attempt)}|${step}`,
      JSON.stringify(record),
      JSON.stringify(stamped),
      this.historyMaxLength,
    );
    if (status === 'OK' || status === 'DUPLICATE' || status === 'GONE') return status;
    throw new OrqError('CONFLICT', `Step ${step} of task ${taskId} skips earlier steps`, {
      details: { sessionId, taskId, attempt, step, status },
      hint: 'Steps are appended in order from 0; resume from loadTaskSteps().length.',
    });
  }

  /**
   * Stores one execution's result, too long to ride in its judge job (task-card.ts
   * inlineResult), for the judge and the coordinator to read (loadResult). Nothing is written
   * when GONE (the session was deleted: a late worker must not leave a key behind) or FENCED (a
   * later delivery of the attempt took a higher fence: this one's result would never be read).
   */
  async putResult(
    sessionId: string,
    taskId: string,
    attempt: number,
    result: TaskResult,
    fence?: number,
  ): Promise<'OK' | 'GONE' | 'FENCED'> {
    const keys = this.keys(sessionId);
    const status = await this.redis.orqPutResult(
      keys.meta,
      keys.results,
      keys.fences,
      resultField(taskId, attempt, fence),
      JSON.stringify(result),
      fenceField(taskId, attempt),
      fence === undefined ? '' : String(fence),
    );
    return status === 'OK' || status === 'FENCED' ? status : 'GONE';
  }

  /** The result putResult stored for one execution, if it is there. */
  async loadResult(
    sessionId: string,
    taskId: string,
    attempt: number,
    fence?: number,
  ): Promise<TaskResult | undefined> {
    const raw = await this.redis.hget(
      this.keys(sessionId).results,
      resultField(taskId, attempt, fence),
    );
    return raw ? TaskResult.parse(JSON.parse(raw)) : undefined;
  }

  /**
   * Removes the results putResult stored for a task attempt once its verdict (from the delivery
   * with `fence`) is recorded: that delivery's, and any an earlier delivery of the attempt
   * stored before it was superseded, which no one reads any more.
   */
  async dropResult(
    sessionId: string,
    taskId: string,
    attempt: number,
    fence?: number,
  ): Promise<void> {
    const fields = Array.from({ length: Math.max(1, fence ?? 1) }, (_, i) =>
      resultField(taskId, attempt, i + 1),
    );
    await this.redis.hdel(this.keys(sessionId).results, ...fields);
  }

  /** The steps appendTaskStep recorded for one execution attempt of a task, in order. */
  async loadTaskSteps(
    sessionId: string,
    taskId: string,
    attempt: number,
  ): Promise<TaskStepRecord[]> {
    const key = this.keys(sessionId).steps;
    const field = stepCountField(taskId, attempt);
    const count = Number((await this.redis.hget(key, field)) ?? 0);
    if (count === 0) return [];
    const fields = Array.from({ length: count }, (_, step) => `${field}|${step}`);
    const raw = (await this.redis.hmget(key, ...fields)).filter((r): r is string => r !== null);
    return raw.map((r) => {
      const parsed = JSON.parse(r) as { step: number; entry: unknown; plan?: unknown };
      return { ...parsed, entry: HistoryEntry.parse(parsed.entry) };
    });
  }

  sessionKeyList(sessionId: string): string[] {
    return sessionKeyList(this.keys(sessionId));
  }
}

/** APPLY_SCRIPT's arguments for a changeset (the layout is documented with the script). */
export function applyArgs(
  changeset: Changeset,
  stamp: { sessionId: string; timestamp: string; historyMaxLength: number },
): (string | number)[] {
  const tasks = changeset.tasks ?? [];
  const written = new Set(tasks.map((t) => t.task.id));
  const expect = [...tasks, ...(changeset.readTasks ?? []).filter((t) => !written.has(t.task.id))];
  const outbox = changeset.outbox ?? [];
  const history = changeset.history ?? [];
  const { session, requireCounters, counters } = changeset;
  const args: (string | number)[] = [
    changeset.eventId,
    (changeset.requireStates ?? []).join(','),
    session ? session.expectedVersion : '',
    session ? JSON.stringify(session.record) : '',
    session ? session.record.state : '',
    requireCounters?.open ?? '',
    requireCounters?.active ?? '',
    counters?.open ?? 0,
    counters?.active ?? 0,
    stamp.historyMaxLength,
    changeset.budgetRaised ? '1' : '',
    expect.length,
    tasks.length,
    outbox.length,
    history.length,
    changeset.unsettledUsage?.length ?? 0,
  ];
  for (const t of expect) args.push(t.task.id, t.version);
  for (const t of tasks) args.push(t.task.id, JSON.stringify(t.task), t.version + 1);
  for (const j of outbox) args.push(j.jobId, JSON.stringify(j));
  // The stamp is appended to each entry's JSON: a spread copy of every entry cost three times
  // the stringify (15.7 against 5.6 µs for a verdict's four entries). A key the entry has
  // already is written twice, and JSON.parse keeps the last, as the spread did.
  const stampJson = `"timestamp":${JSON.stringify(stamp.timestamp)},"sessionId":${JSON.stringify(stamp.sessionId)}}`;
  for (const h of history) {
    const json = JSON.stringify(h);
    args.push(json === '{}' ? `{${stampJson}` : `${json.slice(0, -1)},${stampJson}`);
  }
  if (changeset.unsettledUsage) args.push(...unsettledUsageArgs(changeset.unsettledUsage));
  args.push(changeset.slotLimit ?? '');
  // Every task written joins or leaves the ready set by what it now is, so the set never
  // disagrees with the records (a cancelled or dispatched task leaves it in the same write).
  for (const t of tasks)
    args.push(isWaitingForSlot(t.task) ? waitingScore(t.task.criticalPath) : '');
  const { fence } = changeset;
  args.push(fence ? fenceField(fence.taskId, fence.attempt) : '', fence?.value ?? '');
  // Only while the integration is under way (INTEGRATING, or RUNNING or BLOCKED in its
  // resolution or fixes).
  const record = session?.record;
  const underWay = ['INTEGRATING', 'RUNNING', 'BLOCKED'].includes(record?.state ?? '');
  args.push((underWay && record?.integration?.phase) || '');
  return args;
}

/** Task ids per read script call. */
const READ_CHUNK = 1000;

/** Records then versions of `taskIds`, as READ_TASKS_SCRIPT returns them; absent ones left out. */
function tasksFromReply(taskIds: readonly string[], values: (string | null)[]) {
  const result = new Map<string, TaskSnapshot>();
  taskIds.forEach((id, i) => {
    const raw = values[i];
    if (raw) {
      const version = Number(values[taskIds.length + i] ?? 0);
      result.set(id, { task: Task.parse(JSON.parse(raw)), version });
    }
  });
  return result;
}

/**
 * KEYS: meta, tasks, taskVersions, usage, applied, fences. ARGV[1]: '1' to include the session
 * record; ARGV[2]: an id under which to count usage ('' for none), ARGV[3]: n usages, ARGV[4]: m
 * task ids, ARGV[5]: a field of `fences` to take the next fence of ('' for none), then the
 * usages' 6 × n arguments (unsettledUsageArgs), then the m ids, then m versions the caller
 * holds ('' for none): a task still at the version held comes back without its record (false),
 * so a role whose job carries the task checks it without reading it. The usage is counted, and
 * the fence taken, only while the session exists; the usage only when the id is new in `applied`
 * (a read repeated by a redelivered job counts nothing).
 * Returns state, version, open, active, config revision, data (or false), then the tasks'
 * records, then their versions, then the fence taken (false for none): one consistent snapshot
 * in one round trip.
 */
const READ_TASKS_SCRIPT = `${ADD_USAGE_LUA}
local meta = redis.call('HMGET', KEYS[1], 'state', 'version', 'open', 'active', 'rev')
local reply = {meta[1], meta[2], meta[3], meta[4], meta[5] or '0', false}
if ARGV[1] == '1' then reply[6] = redis.call('HGET', KEYS[1], 'data') end
local nUsage = tonumber(ARGV[3])
local first = 6 + 6 * nUsage
local n = tonumber(ARGV[4])
if meta[1] and ARGV[2] ~= '' and redis.call('SADD', KEYS[5], ARGV[2]) == 1 then
  addUnsettledUsage(KEYS[4], 6, nUsage)
end
if n > 0 then
  local ids = {unpack(ARGV, first, first + n - 1)}
  local versions = redis.call('HMGET', KEYS[3], unpack(ids))
  local wanted = {}
  for i = 1, n do
    -- A caller that holds the task at its current version gets no record: a version check.
    if versions[i] and versions[i] == ARGV[first + n + i - 1] then
      reply[6 + i] = false
    else
      reply[6 + i] = true
      wanted[#wanted + 1] = ids[i]
    end
  end
  if #wanted > 0 then
    local records = redis.call('HMGET', KEYS[2], unpack(wanted))
    local k = 0
    for i = 1, n do
      if reply[6 + i] then k = k + 1; reply[6 + i] = records[k] end
    end
  end
  for i = 1, n do reply[6 + n + i] = versions[i] end
end
reply[7 + 2 * n] = false
if meta[1] and ARGV[5] ~= '' then reply[7 + 2 * n] = redis.call('HINCRBY', KEYS[6], ARGV[5], 1) end
return reply
`;

/** READ_TASKS_SCRIPT's keys and arguments. */
function readTasksArgs(
  keys: SessionKeys,
  taskIds: readonly string[],
  withData: '0' | '1',
  count?: { id: string; usage: readonly UnsettledUsage[] },
  held?: ReadonlyMap<string, number>,
  fence?: string,
): (string | number)[] {
  const args: (string | number)[] = [keys.meta, keys.tasks, keys.taskVersions, keys.usage];
  args.push(keys.applied, keys.fences, withData, count?.id ?? '', count?.usage.length ?? 0);
  args.push(taskIds.length, fence ?? '');
  if (count) args.push(...unsettledUsageArgs(count.usage));
  for (const id of taskIds) args.push(id);
  for (const id of taskIds) args.push(String(held?.get(id) ?? ''));
  return args;
}

/**
 * KEYS: tasks, taskVersions. ARGV: n task ids, then the n versions the caller has ('' for none).
 * Returns per id its current version (false: no such task) and its record when the version is
 * not the caller's (else false): the records the caller lacks, in one consistent read.
 */
const READ_CHANGED_TASKS_SCRIPT = `
local n = #ARGV / 2
local versions = redis.call('HMGET', KEYS[2], unpack(ARGV, 1, n))
local reply = {}
for i = 1, n do
  local version = versions[i]
  reply[2 * i - 1] = version
  if version and version ~= ARGV[n + i] then
    reply[2 * i] = redis.call('HGET', KEYS[1], ARGV[i])
  else
    reply[2 * i] = false
  end
end
return reply
`;

/** Freezes a parsed record all the way down (plain objects and arrays, as JSON gives). */
function deepFreeze<T>(value: T): T {
  if (typeof value === 'object' && value !== null && !Object.isFrozen(value)) {
    Object.freeze(value);
    for (const inner of Object.values(value)) deepFreeze(inner);
  }
  return value;
}

/** Open tasks one process keeps as it wrote them (records without results, mostly). */
const WRITTEN_TASKS_CACHE_SIZE = 20_000;

/** Sessions whose fixed parts one process keeps parsed (a few MB at most). */
const FIXED_PARTS_CACHE_SIZE = 1000;

export function sessionNotFound(sessionId: string): OrqError {
  return new OrqError('NOT_FOUND', `Session ${sessionId} not found`, {
    details: { sessionId },
    hint: 'List sessions with `orq status` (HTTP: GET /sessions) or check the Redis prefix (ORQ_PREFIX).',
  });
}

export function parseHistoryFields(fields: string[]): HistoryEntry {
  const index = fields.indexOf('e');
  const raw = index >= 0 ? fields[index + 1] : undefined;
  return HistoryEntry.parse(JSON.parse(raw ?? '{}'));
}

/** One recorded step of an agent run (see SessionStore.appendTaskStep). */
export interface TaskStepRecord {
  step: number;
  entry: HistoryEntry;
  /** The plan in force after this step, recorded on plan and revision steps. */
  plan?: unknown;
}

const stepCountField = (taskId: string, attempt: number) => `${taskId}|${attempt}`;
/**
 * One delivery's stored result: per fence too, so a stale delivery of the same attempt (paused
 * past its lock) cannot overwrite the result the current one's judge will read.
 */
const resultField = (taskId: string, attempt: number, fence?: number) =>
  `${taskId}|${attempt}${fenceSuffix(fence)}`;

/**
 * KEYS: meta, results, fences. ARGV: field, record, the attempt's field of `fences`, the
 * delivery's fence ('' for none). Writes only while the session exists, and only for a delivery
 * no later one of the same attempt has superseded.
 */
const PUT_RESULT_SCRIPT = `
if redis.call('EXISTS', KEYS[1]) == 0 then return 'GONE' end
if ARGV[4] ~= '' then
  local latest = tonumber(redis.call('HGET', KEYS[3], ARGV[3]) or '0')
  if latest > tonumber(ARGV[4]) then return 'FENCED' end
end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
return 'OK'
`;

/** Deletes an idempotency key only while it still names the session (KEYS[1], ARGV[1]). */
const RELEASE_KEY_SCRIPT = `
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
`;

/**
 * KEYS: the steps hash, the session history stream. ARGV: count field, step, step field,
 * record, entry, maxlen. A step below the attempt's count was written before (DUPLICATE);
 * above it, one is missing (GAP).
 */
const APPEND_STEP_SCRIPT = `
if redis.call('EXISTS', KEYS[3]) == 0 then return 'GONE' end
local n = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0') or 0
local step = tonumber(ARGV[2])
if step < n then return 'DUPLICATE' end
if step > n then return 'GAP' end
redis.call('HSET', KEYS[1], ARGV[3], ARGV[4], ARGV[1], n + 1)
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[6], '*', 'e', ARGV[5])
return 'OK'
`;
