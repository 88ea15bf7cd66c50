import { Session, SessionState } from '../domain/session.js';
import { OrqError } from '../errors.js';
import type { UnsettledUsage } from '../queues.js';
import { defineScripts, type RedisConnection } from '../redis.js';
import { fenceField, sessionKeys } from './keys.js';
import { READ_TASKS_SCRIPT, readTasksArgs, tasksFromReply } from './read-tasks-script.js';
import type { SessionSnapshot, TaskSnapshot, TaskWorkRead } from './session-records.js';
import type { WrittenTasks } from './written-tasks.js';

/**
 * Reads of a session's record (its `meta` hash): whole, or for task-level work with the parts
 * fixed at submit parsed once per process and kept.
 */
export class SessionReads {
  /** Sessions as first read: only their submit-time parts are used (loadForTask). */
  private readonly fixedParts = new Map<string, { session: Session; rev: string }>();

  constructor(
    private readonly redis: RedisConnection,
    private readonly prefix: string,
    /** Open tasks as this process last wrote them (ChangesetWriter keeps them). */
    private readonly written: WrittenTasks,
  ) {
    defineScripts(redis, { orqReadTasks: [6, READ_TASKS_SCRIPT] });
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
  ): Promise<TaskWorkRead> {
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

  private remember(sessionId: string, rev: string, data: string): Session {
    const fixed = Session.parse(JSON.parse(data));
    if (this.fixedParts.size >= FIXED_PARTS_CACHE_SIZE && !this.fixedParts.has(sessionId)) {
      const oldest = this.fixedParts.keys().next().value;
      if (oldest !== undefined) this.fixedParts.delete(oldest);
    }
    this.fixedParts.set(sessionId, { session: fixed, rev });
    return fixed;
  }

  /** Whether the session's budget refused a call and has not been raised since (usage-store.ts). */
  async budgetRefused(sessionId: string): Promise<boolean> {
    return (await this.redis.hexists(this.keys(sessionId).usage, 'exhausted')) === 1;
  }

  private keys(sessionId: string) {
    return sessionKeys(this.prefix, sessionId);
  }
}

/** Sessions whose fixed parts one process keeps parsed (a few MB at most). */
const FIXED_PARTS_CACHE_SIZE = 1000;

export function sessionNotFound(sessionId: string): OrqError {
  return new OrqError('NOT_FOUND', `Session ${sessionId} not found`, {
    details: { sessionId },
    hint: 'List sessions with `orq status` (HTTP: GET /sessions) or check the Redis prefix (ORQ_PREFIX).',
  });
}
