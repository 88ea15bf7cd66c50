import {
  FINISHED_TASK_STATES,
  SATISFYING_TASK_STATES,
  TaskState,
  type Task,
} from '../domain/task.js';

export interface SessionProgress {
  /** Tasks per state; every state is present, with 0 when no task is in it. */
  counts: Record<TaskState, number>;
  total: number;
  /** Every task is DONE, REPLACED_BY_REPLAN, SKIPPED or CANCELLED (and there is one at least). */
  finished: boolean;
  /** Nothing can move until a person resumes a BLOCKED task. */
  blocked: boolean;
  /**
   * Not finished and nothing can move, whether or not a task is BLOCKED: `blocked` plus the
   * case of READY tasks that wait only on CANCELLED, replaced or unknown tasks.
   */
  stalled: boolean;
  /** READY tasks whose dependencies are all satisfied, in the order given. */
  runnableTaskIds: string[];
}

type TaskProgressView = Pick<Task, 'id' | 'state' | 'dependencies'>;

/** Running now, or about to run again with the judge's feedback: the session is moving. */
const IN_PROGRESS_STATES: readonly TaskState[] = ['RUNNING', 'NEEDS_CONTINUATION'];

/**
 * Where a session stands, from its tasks alone (DESIGN.md, lifecycle step 4).
 *
 * A dependency is satisfied only when it is DONE or SKIPPED. A READY task behind a CANCELLED
 * task therefore never becomes runnable: cancelling is a decision that the work is not wanted,
 * unlike skipping, which the user does on resume to let dependents go on. The same holds for a
 * dependency that is REPLACED_BY_REPLAN (the replan rewires dependents, so this means a broken
 * graph) or an id no task has. Such a session is `stalled` without being `blocked` when no
 * task is BLOCKED, so the coordinator can still tell it will not finish by itself.
 *
 * A session with no tasks (not planned yet) is neither finished nor blocked.
 */
export function summarizeSessionProgress(tasks: readonly TaskProgressView[]): SessionProgress {
  const counts = Object.fromEntries(TaskState.options.map((s) => [s, 0])) as Record<
    TaskState,
    number
  >;
  const stateById = new Map<string, TaskState>();
  for (const task of tasks) {
    counts[task.state] += 1;
    stateById.set(task.id, task.state);
  }

  const satisfied = (dependencyId: string): boolean => {
    const state = stateById.get(dependencyId);
    return state !== undefined && SATISFYING_TASK_STATES.includes(state);
  };
  const runnableTaskIds = tasks
    .filter((t) => t.state === 'READY' && t.dependencies.every(satisfied))
    .map((t) => t.id);

  const total = tasks.length;
  const finished = total > 0 && tasks.every((t) => FINISHED_TASK_STATES.includes(t.state));
  const inProgress = tasks.some((t) => IN_PROGRESS_STATES.includes(t.state));
  const stalled = total > 0 && !finished && !inProgress && runnableTaskIds.length === 0;
  const blocked = stalled && counts.BLOCKED > 0;

  return { counts, total, finished, blocked, stalled, runnableTaskIds };
}
