import type { Result } from 'ioredis';
import { chunked } from '../chunked.js';
import { Task } from '../domain/task.js';
import { defineScripts, type RedisConnection } from '../redis.js';
import { fenceField, sessionKeys } from './keys.js';
import { READ_TASKS_SCRIPT, readTasksArgs, tasksFromReply } from './read-tasks-script.js';
import type { TaskSnapshot } from './session-records.js';

declare module 'ioredis' {
  interface RedisCommander<Context> {
    orqReadChangedTasks(
      tasks: string,
      taskVersions: string,
      ...idsThenVersions: string[]
    ): Result<(string | null)[], Context>;
  }
}

/**
 * Reads of a session's task records (its `tasks` and `taskVersions` hashes), with the version
 * each was read at, and of the fences its work deliveries took.
 */
export class TaskReads {
  constructor(
    private readonly redis: RedisConnection,
    private readonly prefix: string,
  ) {
    defineScripts(redis, {
      orqReadTasks: [6, READ_TASKS_SCRIPT],
      orqReadChangedTasks: [2, READ_CHANGED_TASKS_SCRIPT],
    });
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

  /**
   * The fence of the latest work delivery of a task attempt (0: none took one yet): which
   * delivery's hand-off a redelivery looks for before it runs the job again.
   */
  async currentFence(sessionId: string, taskId: string, attempt: number): Promise<number> {
    const value = await this.redis.hget(this.keys(sessionId).fences, fenceField(taskId, attempt));
    return Number(value ?? 0);
  }

  private keys(sessionId: string) {
    return sessionKeys(this.prefix, sessionId);
  }
}

/** Task ids per read script call. */
const READ_CHUNK = 1000;

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
