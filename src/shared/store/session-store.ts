import type { HistoryEntryDraft } from '../domain/history.js';
import type { Session } from '../domain/session.js';
import type { Task, TaskResult } from '../domain/task.js';
import type { OutboxJob, UnsettledUsage } from '../queues.js';
import type { RedisConnection } from '../redis.js';
import { ChangesetWriter } from './changeset-writer.js';
import { ExecutionRecords } from './execution-records.js';
import { sessionKeys } from './keys.js';
import { PendingRequests } from './pending-requests.js';
import { SessionHistory } from './session-history.js';
import { SessionIndex } from './session-index.js';
import { SessionReads, sessionNotFound } from './session-reads.js';
import type {
  ApplyResult,
  Changeset,
  SessionSnapshot,
  StoredHistoryEntry,
  TaskSnapshot,
  TaskStepRecord,
  TaskWorkRead,
} from './session-records.js';
import { TaskReads } from './task-reads.js';
import { WrittenTasks } from './written-tasks.js';

/**
 * Reads and writes orq's session state in Redis. Only the coordinator and producers write.
 *
 * The one object the rest of orq holds; each group of methods hands on to the module that
 * keeps that part of a session, where the details are documented.
 */
export class SessionStore {
  /** The sessions by creation time, all of them and per tenant. */
  readonly index: SessionIndex;
  private readonly sessions: SessionReads;
  private readonly tasks: TaskReads;
  private readonly writer: ChangesetWriter;
  private readonly histories: SessionHistory;
  private readonly requests: PendingRequests;
  private readonly executions: ExecutionRecords;

  constructor(
    readonly redis: RedisConnection,
    readonly prefix: string,
    historyMaxLength = 100_000,
    now: () => Date = () => new Date(),
  ) {
    /** Open tasks as this process last wrote them: the writer keeps them, writtenTasks reads. */
    const written = new WrittenTasks(WRITTEN_TASKS_CACHE_SIZE);
    this.index = new SessionIndex(redis, prefix);
    this.sessions = new SessionReads(redis, prefix, written);
    this.tasks = new TaskReads(redis, prefix);
    this.writer = new ChangesetWriter(redis, prefix, written, historyMaxLength, now);
    this.histories = new SessionHistory(redis, prefix);
    this.requests = new PendingRequests(redis, prefix);
    this.executions = new ExecutionRecords(redis, prefix, historyMaxLength, now);
  }

  keys(sessionId: string) {
    return sessionKeys(this.prefix, sessionId);
  }

  // The session record (session-reads.ts).

  loadSession(sessionId: string): Promise<SessionSnapshot | undefined> {
    return this.sessions.loadSession(sessionId);
  }

  async requireSession(sessionId: string): Promise<SessionSnapshot> {
    const snapshot = await this.loadSession(sessionId);
    if (!snapshot) throw sessionNotFound(sessionId);
    return snapshot;
  }

  /** The session and a few of its tasks for task-level work, in one round trip. */
  loadForTask(
    sessionId: string,
    taskIds: readonly string[] = [],
    count?: { id: string; usage: readonly UnsettledUsage[] },
    held?: ReadonlyMap<string, number>,
    fence?: { taskId: string; attempt: number },
  ): Promise<TaskWorkRead> {
    return this.sessions.loadForTask(sessionId, taskIds, count, held, fence);
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

  /** The coordinator's shortcut: the session and tasks as this process last wrote them. */
  writtenTasks(
    sessionId: string,
    taskIds: readonly string[],
  ): { session: Session; tasks: Map<string, TaskSnapshot> } | undefined {
    return this.sessions.writtenTasks(sessionId, taskIds);
  }

  /** Whether the session's budget refused a call and has not been raised since. */
  budgetRefused(sessionId: string): Promise<boolean> {
    return this.sessions.budgetRefused(sessionId);
  }

  // The session index (session-index.ts).

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

  // Task records (task-reads.ts).

  loadTasks(sessionId: string, taskIds: readonly string[]): Promise<Map<string, TaskSnapshot>> {
    return this.tasks.loadTasks(sessionId, taskIds);
  }

  loadTask(sessionId: string, taskId: string): Promise<TaskSnapshot | undefined> {
    return this.tasks.loadTask(sessionId, taskId);
  }

  /** The active count and the tasks waiting for a slot, longest critical path first. */
  readSlots(
    sessionId: string,
    limit: number,
  ): Promise<{ active: number; waiting: TaskSnapshot[] }> {
    return this.tasks.readSlots(sessionId, limit);
  }

  /** `taskIds` in that order, for display; only those written since when given `cache`. */
  loadTasksInOrder(
    sessionId: string,
    taskIds: readonly string[],
    cache?: Map<string, TaskSnapshot>,
  ): Promise<Task[]> {
    return this.tasks.loadTasksInOrder(sessionId, taskIds, cache);
  }

  /** The fence of the latest work delivery of a task attempt (0: none took one yet). */
  currentFence(sessionId: string, taskId: string, attempt: number): Promise<number> {
    return this.tasks.currentFence(sessionId, taskId, attempt);
  }

  // The one write (changeset-writer.ts).

  apply(sessionId: string, changeset: Changeset): Promise<ApplyResult> {
    return this.writer.apply(sessionId, changeset);
  }

  // History (session-history.ts).

  history(
    sessionId: string,
    options: { after?: string; count?: number } = {},
  ): Promise<StoredHistoryEntry[]> {
    return this.histories.read(sessionId, options);
  }

  /** The id of the session's newest history entry (a cursor for what comes next). */
  lastHistoryId(sessionId: string): Promise<string | undefined> {
    return this.histories.lastId(sessionId);
  }

  // The outbox and idempotency keys (pending-requests.ts).

  readOutbox(sessionId: string): Promise<OutboxJob[]> {
    return this.requests.readOutbox(sessionId);
  }

  removeFromOutbox(sessionId: string, jobIds: string[]): Promise<void> {
    return this.requests.removeFromOutbox(sessionId, jobIds);
  }

  /** Reserves an idempotency key for a session id; returns the id already holding it, if any. */
  claimIdempotencyKey(key: string, sessionId: string): Promise<string | undefined> {
    return this.requests.claimIdempotencyKey(key, sessionId);
  }

  /** Frees an idempotency key while it still names the session; returns whether it was freed. */
  releaseIdempotencyKey(key: string, sessionId: string): Promise<boolean> {
    return this.requests.releaseIdempotencyKey(key, sessionId);
  }

  // Stored results and agent steps of executions (execution-records.ts).

  /** Appends one step of an agent run to the session history, once per step. */
  appendTaskStep(
    sessionId: string,
    taskId: string,
    attempt: number,
    step: number,
    entry: HistoryEntryDraft,
    plan?: unknown,
  ): Promise<'OK' | 'DUPLICATE' | 'GONE'> {
    return this.executions.appendTaskStep(sessionId, taskId, attempt, step, entry, plan);
  }

  loadTaskSteps(sessionId: string, taskId: string, attempt: number): Promise<TaskStepRecord[]> {
    return this.executions.loadTaskSteps(sessionId, taskId, attempt);
  }

  /** Stores one execution's result, too long to ride in its judge job. */
  putResult(
    sessionId: string,
    taskId: string,
    attempt: number,
    result: TaskResult,
    fence?: number,
  ): Promise<'OK' | 'GONE' | 'FENCED'> {
    return this.executions.putResult(sessionId, taskId, attempt, result, fence);
  }

  loadResult(
    sessionId: string,
    taskId: string,
    attempt: number,
    fence?: number,
  ): Promise<TaskResult | undefined> {
    return this.executions.loadResult(sessionId, taskId, attempt, fence);
  }

  /** Removes a task attempt's stored results once its verdict is recorded. */
  dropResult(sessionId: string, taskId: string, attempt: number, fence?: number): Promise<void> {
    return this.executions.dropResult(sessionId, taskId, attempt, fence);
  }
}

/** Open tasks one process keeps as it wrote them (records without results, mostly). */
const WRITTEN_TASKS_CACHE_SIZE = 20_000;
