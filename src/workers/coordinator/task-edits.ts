import {
  ACTIVE_TASK_STATES,
  FINISHED_TASK_STATES,
  isWaitingForSlot,
  SATISFYING_TASK_STATES,
  Task,
  type TaskState,
} from '../../shared/domain/task.js';
import type { HistoryEntryDraft } from '../../shared/domain/history.js';
import { jobIds, outboxJob, type OutboxJob } from '../../shared/queues.js';
import type { Changeset, Counters, TaskSnapshot } from '../../shared/store/session-records.js';
import type { SessionStore } from '../../shared/store/session-store.js';
import type { Session } from '../../shared/domain/session.js';
import type { JudgingConfig } from '../../shared/config/schema.js';
import { pickForSlots } from '../../shared/rules/critical-path.js';
import { inBand } from '../../shared/fair-release.js';
import { taskCard } from '../../shared/task-card.js';
import type { StepDecision } from '../../shared/domain/human-wait.js';

/**
 * Waiting tasks a refill chooses among beyond the ones it takes: concurrent refills of one
 * session rarely pick the same task (a version conflict, then a retry).
 */
const WAITING_SPREAD = 4;

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
  /** Tasks this transition made runnable, with why: dispatched by fillSlots as slots allow. */
  private readonly runnable = new Map<string, string>();
  readonly history: HistoryEntryDraft[] = [];

  readonly sessionId: string;

  constructor(
    /** The session the tasks are of: its tenant and priority go with the work jobs. */
    private readonly session: Pick<Session, 'id' | 'tenant' | 'priority'> & {
      config: { judging: JudgingConfig };
    },
    snapshots: Iterable<TaskSnapshot>,
    /** When this transition happens (ISO time): the start and end times it writes. */
    private readonly at: string = new Date().toISOString(),
    private readonly random: () => number = Math.random,
  ) {
    this.sessionId = session.id;
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

  /**
   * A task may run: a continuation (NEEDS_CONTINUATION) keeps its slot and goes to a worker at
   * once; a READY one is dispatched by fillSlots when its session has a slot for it, and
   * otherwise waits in the session's ready set.
   */
  dispatch(
    taskId: string,
    reason: string,
    state: 'RUNNING' | 'NEEDS_CONTINUATION' = 'RUNNING',
  ): void {
    if (state === 'NEEDS_CONTINUATION') this.start(taskId, reason, state);
    else this.runnable.set(taskId, reason);
  }

  /**
   * The version `taskId` will have once this transition's write lands (the apply writes each
   * task at the version it was read at plus one): the version a job it sends can check.
   */
  nextVersion(taskId: string): number {
    return (this.original.get(taskId)?.version ?? 0) + 1;
  }

  /** Whether this transition may change which tasks hold or wait for a slot. */
  movesSlots(): boolean {
    return this.runnable.size > 0 || this.counterDelta().active < 0;
  }

  /**
   * Dispatches what the session's slots allow: with `limit` (scheduling.maxTasksInFlight) as
   * many of the runnable and `waiting` tasks as `active` leaves room for, longest critical path
   * first (the rest wait in the ready set); without, every runnable task.
   */
  fillSlots(slots?: { limit: number; active: number; waiting: readonly TaskSnapshot[] }): void {
    if (!slots) {
      const ready = [...this.runnable.keys()].map((id) => this.get(id));
      // All at once, longest path first: their fair-release tags, so their order in the work
      // queue, follow the order they are dispatched in.
      for (const task of pickForSlots(ready, Infinity)) {
        this.start(task.id, this.runnable.get(task.id) ?? '');
      }
      this.runnable.clear();
      return;
    }
    for (const snapshot of slots.waiting) this.addSnapshot(snapshot);
    const candidates = new Map<string, string>(this.runnable);
    for (const { task } of slots.waiting) {
      if (!candidates.has(task.id)) {
        candidates.set(task.id, `a slot of the session is free for ${task.id}`);
      }
    }
    const ready = [...candidates.keys()].map((id) => this.get(id)).filter(isWaitingForSlot);
    const free = slots.limit - (slots.active + this.counterDelta().active);
    // Coordinators finishing tasks of one session at once would all take the same first waiting
    // task, and all but one would conflict and retry: taken from the first few, they seldom meet.
    const spread = slots.waiting.length > 0 ? WAITING_SPREAD : 0;
    const picked = pickForSlots(ready, free, spread, this.random);
    for (const task of picked) this.start(task.id, candidates.get(task.id) ?? '');
    this.runnable.clear();
  }

  /** Sends a task to a worker: RUNNING (or kept NEEDS_CONTINUATION), next attempt enqueued. */
  private start(
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
    // judging.checkAlreadySatisfied: the first execution waits for the judge's word (issue 50).
    if (
      attempt === 1 &&
      this.session.config.judging.checkAlreadySatisfied &&
      task.checkedBeforeRun === undefined
    ) {
      this.outbox.push(
        inBand(
          this.session,
          outboxJob('judge', 'check-task', jobIds.checkTask(this.sessionId, taskId), {
            sessionId: this.sessionId,
            taskId,
            attempt,
            task: this.cardOf(taskId, attempt),
          }),
        ),
      );
      return;
    }
    this.sendToWorker(taskId, attempt);
  }

  /** The task as a job carries it, with the outputs of the dependencies this transition holds. */
  private cardOf(taskId: string, attempt: number) {
    return taskCard(this.get(taskId), attempt, this.nextVersion(taskId), (id) =>
      this.current.get(id),
    );
  }

  /**
   * Enqueues the work job of a RUNNING task's `attempt`: its first, once the judge found it not
   * met yet (judging.checkAlreadySatisfied), or any one start() sends.
   */
  sendToWorker(taskId: string, attempt: number, resume?: StepDecision): void {
    const task = this.get(taskId);
    // The task as the worker will find it, with the outputs of the dependencies this
    // transition holds (the one just done, mostly); the others are referenced.
    const card = this.cardOf(taskId, attempt);
    // A person's decision resumes the same execution in a job of its own (issue 48).
    const jobId = resume
      ? jobIds.resumeExecute(this.sessionId, taskId, attempt, resume.waitId)
      : jobIds.execute(this.sessionId, taskId, attempt);
    this.outbox.push({
      ...outboxJob('work', 'execute', jobId, {
        sessionId: this.sessionId,
        taskId,
        attempt,
        ...(resume ? { resume } : {}),
        tenant: this.session.tenant,
        // The ids ride alone only for a card without the task's text (read, as before it).
        ...(!card.body &&
        task.dependencies.length > 0 &&
        task.dependencies.length <= DEPENDENCIES_IN_JOB
          ? { dependencies: task.dependencies }
          : {}),
        task: card,
      }),
      fairShare: {
        tenant: this.session.tenant,
        priority: this.session.priority,
        ...(task.criticalPath !== undefined ? { criticalPath: task.criticalPath } : {}),
      },
    });
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

/**
 * Dispatches what `edits` made runnable, as the session's slots allow, reading its active count
 * and waiting tasks only when the transition frees a slot or makes a task runnable. Returns the
 * changeset's slotLimit: the apply refuses the write if a concurrent one made that read stale.
 */
/**
 * The changeset of a task transition in a RUNNING session: `edits`, with the slots they free or
 * fill taken up (fillSlots), and the session's record when the transition changes it too.
 */
export async function taskChangeset(
  store: Pick<SessionStore, 'readSlots'>,
  eventId: string,
  edits: TaskEdits,
  owner: Pick<Session, 'id' | 'config'>,
  session?: { record: Session; expectedVersion: number },
): Promise<Changeset> {
  const slots = await fillSlots(store, edits, owner);
  return {
    eventId,
    requireStates: ['RUNNING'],
    ...slots,
    ...(session ? { session } : {}),
    tasks: edits.changes(),
    readTasks: edits.reads(),
    counters: edits.counterDelta(),
    outbox: edits.outbox,
    history: edits.history,
  };
}

export async function fillSlots(
  store: Pick<SessionStore, 'readSlots'>,
  edits: TaskEdits,
  session: Pick<Session, 'id' | 'config'>,
): Promise<{ slotLimit?: number }> {
  const limit = session.config.scheduling.maxTasksInFlight;
  if (limit === 0) {
    edits.fillSlots();
    return {};
  }
  if (!edits.movesSlots()) return {};
  const { active, waiting } = await store.readSlots(session.id, limit);
  edits.fillSlots({ limit, active, waiting });
  return { slotLimit: limit };
}
