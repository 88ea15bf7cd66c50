/**
 * Redis keys of orq's own state. Every key of one session carries the hash tag `{sid}`, so a
 * session's atomic transitions run on one Redis Cluster slot.
 */
export interface SessionKeys {
  /** Hash: data (Session JSON), version, state, open, active. */
  meta: string;
  /** Hash: task id → Task JSON. */
  tasks: string;
  /** Hash: task id → version (compare-and-swap). */
  taskVersions: string;
  /** Hash: job id → OutboxJob JSON, written atomically with a transition, drained after. */
  outbox: string;
  /** Set of applied event ids: an event applied twice changes nothing. */
  applied: string;
  /** Stream: the session's append-only history. */
  history: string;
  /** Hash: token usage, USD estimate and budget reservations (usage-store.ts). */
  usage: string;
  /** Sorted set of the reservations of calls in flight, by when they lapse (usage-store.ts). */
  leases: string;
  /**
   * Hash of the agent executor's steps: field `<taskId>|<attempt>` counts an attempt's steps,
   * `<taskId>|<attempt>|<step>` holds each one. Task ids never contain `|`.
   */
  steps: string;
  /**
   * Hash: `<taskId>|<attempt>` → an execution's result (TaskResult JSON) too long to ride in its
   * judge job and verdict event (task-card.ts inlineResult): the worker stores it, the judge and
   * the coordinator read it; the coordinator removes it once the verdict is recorded.
   */
  results: string;
  /**
   * Hash: event id → when it was enqueued (ms), of each resume a client asked for. One whose id
   * is not in `applied` yet waits for the coordinator (pending-resumes.ts).
   */
  resumes: string;
  /**
   * Sorted set of the session's READY tasks with no dependency left, waiting for one of its
   * slots (scheduling.maxTasksInFlight), scored by waitingScore: the longest critical path
   * first. Kept by APPLY_SCRIPT from every task it writes, so it never disagrees with them.
   */
  ready: string;
  /**
   * Hash: `<taskId>|<attempt>` → the fence of the attempt's latest work delivery. Each delivery of
   * a work job takes the next number as it reads its task (readTasks); the result it hands on
   * carries it, and the apply refuses one whose number is below the field's (FENCED): a delivery
   * paused past its lock cannot hand on after a later delivery of the job started.
   */
  fences: string;
  /**
   * String left by the session's delete, for a day (DELETED_MARK_TTL_SECONDS): while it is there
   * no create of this id is applied (GONE), so a submit that read the id before the delete
   * cannot bring the session back. Not in sessionKeyList: it is no part of the session's state,
   * and outlives it.
   */
  deleted: string;
}

export function sessionKeys(prefix: string, sessionId: string): SessionKeys {
  const base = `${prefix}:s:{${sessionId}}`;
  return {
    meta: `${base}:meta`,
    tasks: `${base}:tasks`,
    taskVersions: `${base}:tver`,
    outbox: `${base}:outbox`,
    applied: `${base}:applied`,
    history: `${base}:history`,
    usage: `${base}:usage`,
    leases: `${base}:leases`,
    steps: `${base}:steps`,
    results: `${base}:results`,
    resumes: `${base}:resumes`,
    ready: `${base}:ready`,
    fences: `${base}:fences`,
    deleted: `${base}:deleted`,
  };
}

/** The keys that hold the session's state: all of them but the `deleted` mark. */
export function sessionKeyList(keys: SessionKeys): string[] {
  return [
    keys.meta,
    keys.tasks,
    keys.taskVersions,
    keys.outbox,
    keys.applied,
    keys.history,
    keys.usage,
    keys.leases,
    keys.steps,
    keys.results,
    keys.resumes,
    keys.ready,
    keys.fences,
  ];
}

/** The field of a task attempt in a session's `fences`. Task ids never contain `|`. */
export const fenceField = (taskId: string, attempt: number) => `${taskId}|${attempt}`;

/** Sorted set of all session ids by creation time. */
export const sessionIndexKey = (prefix: string) => `${prefix}:sessions`;
/** Sorted set of one tenant's session ids by creation time (session-index.ts). */
export const tenantSessionIndexKey = (prefix: string, tenant: string) =>
  `${prefix}:tenant-sessions:${tenant}`;
/** Set once the tenants' indexes hold the sessions stored before there were any. */
export const tenantIndexBuiltKey = (prefix: string) => `${prefix}:tenant-sessions-built`;
/**
 * How long a delete's mark refuses a create of the session's id. A submit reads the id and
 * creates the session milliseconds apart; a day covers one stalled in between by far, and lets
 * the marks of a busy installation's deletes go.
 */
export const DELETED_MARK_TTL_SECONDS = 86_400;

/** Session id by idempotency key. */
export const idempotencyKey = (prefix: string, key: string) => `${prefix}:idem:${key}`;

/**
 * Pub/sub channel on which a session's end (a finished state) is announced, so processes with
 * model calls of that session in flight abort them at once (cancellation.ts).
 */
export const sessionEndedChannel = (prefix: string) => `${prefix}:session-ended`;
