import {
  ACTIVE_TASK_STATES,
  FINISHED_TASK_STATES,
  SATISFYING_TASK_STATES,
  Task,
  type TaskState,
} from '../../shared/domain/task.js';
import type { HistoryEntryDraft } from '../../shared/domain/history.js';
import { jobIds, outboxJob, type OutboxJob } from '../../shared/queues.js';
import type { Counters, TaskSnapshot } from '../../shared/store/session-store.js';

/** Up to this many, a task's dependencies ride in its execute job (loadForTask reads a few). */
const DEPENDENCIES_IN_JOB = 100;

export const isOpen = (state: TaskState) => !FINISHED_TASK_STATES.includes(state);
export const isActive = (state: TaskState) => ACTIVE_TASK_STATES.includes(state);
export const isSatisfying = (state: TaskState) => SATISFYING_TASK_STATES.includes(state);

/**
 * The tasks a transition read and the edits it makes. Counter deltas (open/active) are derived
 * from the before/after states, so no transition has to keep them right by hand.
 */
export class TaskEdits {
  private readonly original = new Map<string, TaskSnapshot>();
  private readonly current = new Map<string, Task>();
  private readonly edited = new Set<string>();
  readonly outbox: OutboxJob[] = [];
  readonly history: HistoryEntryDraft[] = [];

  constructor(
    readonly sessionId: string,
    snapshots: Iterable<TaskSnapshot>,
    /** When this transition happens (ISO time): the start and end times it writes. */
    private readonly at: string = new Date().toISOString(),
  ) {
    for (const s of snapshots) this.addSnapshot(s);
  }

  addSnapshot(snapshot: TaskSnapshot): void {
    if (this.original.has(snapshot.task.id)) return;
    this.original.set(snapshot.task.id, snapshot);
    this.current.set(snapshot.task.id, snapshot.task);
  }

  has(taskId: string): boolean {
    return this.current.has(taskId);
  }

  get(taskId: string): Task {
    const task = this.current.get(taskId);
    if (!task) throw new Error(`task ${taskId} was not loaded for this transition`);
    return task;
  }

  /**
   * Writes a task (new or loaded), recording a state_change entry when its state moved; a task
   * that moves to BLOCKED keeps the reason as its blockedReason until it moves on.
   */
  put(edited: Task, reason?: string): void {
    const before = this.current.get(edited.id);
    const from = before?.state;
    const task =
      from === edited.state ? edited : withEnd(withBlockedReason(edited, reason), from, this.at);
    if (!this.original.has(task.id)) this.original.set(task.id, { task, version: 0 });
    this.current.set(task.id, task);
    this.edited.add(task.id);
    if (from !== task.state) {
      this.history.push({
        type: 'state_change',
        entity: 'task',
        taskId: task.id,
        ...(from ? { from } : {}),
        to: task.state,
        ...(reason ? { reason } : {}),
      });
    }
  }

  /** Sends a task to a worker: RUNNING (or kept NEEDS_CONTINUATION), next attempt enqueued. */
  dispatch(
    taskId: string,
    reason: string,
    state: 'RUNNING' | 'NEEDS_CONTINUATION' = 'RUNNING',
  ): void {
    const { endedAt: _ended, ...task } = this.get(taskId);
    const attempt = task.attempts + 1;
    this.put(
      { ...task, state, attempts: attempt, replanPending: false, startedAt: this.at },
      reason,
    );
    this.outbox.push(
      outboxJob('work', 'execute', jobIds.execute(this.sessionId, taskId, attempt), {
        sessionId: this.sessionId,
        taskId,
        attempt,
        ...(task.dependencies.length > 0 && task.dependencies.length <= DEPENDENCIES_IN_JOB
          ? { dependencies: task.dependencies }
          : {}),
      }),
    );
  }

  /**
   * A task reached DONE or SKIPPED: each dependent has one dependency fewer to wait for and is
   * dispatched when none is left. Touches only the task's dependents (O(out-degree)).
   */
  releaseDependents(taskId: string): void {
    for (const dependentId of this.get(taskId).dependents) {
      if (!this.has(dependentId)) continue;
      const dependent = this.get(dependentId);
      const pending = Math.max(0, dependent.pendingDependencies - 1);
      this.put({ ...dependent, pendingDependencies: pending });
      if (pending === 0 && dependent.state === 'READY') {
        this.dispatch(dependentId, `dependencies of ${dependentId} are done`);
      }
    }
  }

  changes(): TaskSnapshot[] {
    return [...this.edited].map((id) => ({
      task: Task.parse(this.current.get(id)),
      version: this.original.get(id)?.version ?? 0,
    }));
  }

  reads(): TaskSnapshot[] {
    return [...this.original.values()];
  }

  counterDelta(): Counters {
    let open = 0;
    let active = 0;
    for (const id of this.edited) {
      const before = this.original.get(id);
      const after = this.current.get(id);
      if (!after) continue;
      const wasNew = !before || before.version === 0;
      open += (isOpen(after.state) ? 1 : 0) - (!wasNew && isOpen(before.task.state) ? 1 : 0);
      active += (isActive(after.state) ? 1 : 0) - (!wasNew && isActive(before.task.state) ? 1 : 0);
    }
    return { open, active };
  }
}

/** A task that stops running (from an active state to another) ends its execution now. */
function withEnd(task: Task, from: TaskState | undefined, at: string): Task {
  return from !== undefined && isActive(from) && !isActive(task.state)
    ? { ...task, endedAt: at }
    : task;
}

/** The task with the reason it is BLOCKED, or without one once it is not. */
function withBlockedReason(task: Task, reason: string | undefined): Task {
  if (task.state === 'BLOCKED') return reason ? { ...task, blockedReason: reason } : task;
  if (task.blockedReason === undefined) return task;
  const { blockedReason: _reason, ...rest } = task;
  return rest;
}
