import type { TaskSnapshot } from './session-records.js';

/**
 * The tasks a client last read of its most recent sessions, for SessionStore.loadTasksInOrder: a
 * followed session (the live view, an HTTP poller) is read again and again, and only its tasks
 * written since need reading. Bounded by sessions and by tasks in all, since task records carry
 * results: the oldest sessions go first, never the one just read.
 */
export class TaskViewCache {
  private readonly sessions = new Map<string, Map<string, TaskSnapshot>>();

  constructor(
    private readonly maxSessions: number,
    private readonly maxTasks: number,
  ) {}

  /** The cache of `sessionId`, now the most recent (a new, empty one the first time). */
  of(sessionId: string): Map<string, TaskSnapshot> {
    const cache = this.sessions.get(sessionId) ?? new Map<string, TaskSnapshot>();
    this.sessions.delete(sessionId);
    this.sessions.set(sessionId, cache);
    return cache;
  }

  /** Drops the least recent sessions until both bounds hold or only the most recent is left. */
  trim(): void {
    let tasks = 0;
    for (const cache of this.sessions.values()) tasks += cache.size;
    for (const [sessionId, cache] of this.sessions) {
      if (this.sessions.size <= 1) break;
      if (this.sessions.size <= this.maxSessions && tasks <= this.maxTasks) break;
      this.sessions.delete(sessionId);
      tasks -= cache.size;
    }
  }

  /** Sessions cached, least recent first. */
  sessionIds(): string[] {
    return [...this.sessions.keys()];
  }
}
