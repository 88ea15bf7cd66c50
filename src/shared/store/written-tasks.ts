import type { TaskSnapshot } from './session-records.js';

/**
 * The open tasks one process last wrote, per session, each with the version its write gave
 * it: the coordinator builds its next transition of a task from here instead of reading the
 * task back. An entry is only a guess: the apply script checks every version it builds on, and
 * SessionStore drops the entries an apply was refused on, so the retry reads.
 *
 * Bounded to `capacity` tasks; past it, the tasks of the session touched longest ago go first.
 */
export class WrittenTasks {
  private readonly bySession = new Map<string, Map<string, TaskSnapshot>>();
  private count = 0;
  /** The session put last, already at the back of the eviction order. */
  private latest: string | undefined;

  constructor(private readonly capacity: number) {}

  get size(): number {
    return this.count;
  }

  put(sessionId: string, entry: TaskSnapshot): void {
    let tasks = this.bySession.get(sessionId);
    // Re-inserted, the session moves to the back of the eviction order (once per run of puts:
    // an accepted plan writes thousands of one session's tasks).
    if (!tasks || sessionId !== this.latest) {
      tasks ??= new Map<string, TaskSnapshot>();
      this.bySession.delete(sessionId);
      this.bySession.set(sessionId, tasks);
      this.latest = sessionId;
    }
    if (!tasks.has(entry.task.id)) this.count += 1;
    tasks.set(entry.task.id, entry);
    while (this.count > this.capacity) this.evictOne();
  }

  drop(sessionId: string, taskId: string): void {
    const tasks = this.bySession.get(sessionId);
    if (!tasks?.delete(taskId)) return;
    this.count -= 1;
    if (tasks.size === 0) this.bySession.delete(sessionId);
  }

  forget(sessionId: string): void {
    const tasks = this.bySession.get(sessionId);
    if (!tasks) return;
    this.count -= tasks.size;
    this.bySession.delete(sessionId);
  }

  /** Every one of `taskIds`, or undefined when any is not here. */
  get(sessionId: string, taskIds: readonly string[]): Map<string, TaskSnapshot> | undefined {
    const tasks = this.bySession.get(sessionId);
    if (!tasks) return undefined;
    const found = new Map<string, TaskSnapshot>();
    for (const id of taskIds) {
      const entry = tasks.get(id);
      if (!entry) return undefined;
      found.set(id, entry);
    }
    return found;
  }

  private evictOne(): void {
    const [sessionId, tasks] = this.bySession.entries().next().value ?? [];
    if (sessionId === undefined || !tasks) return;
    const taskId = tasks.keys().next().value;
    if (taskId === undefined) this.bySession.delete(sessionId);
    else this.drop(sessionId, taskId);
  }
}
