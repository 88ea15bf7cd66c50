import { OrqError } from '../errors.js';
import type { PlannedTask } from '../domain/plan.js';
import { FINISHED_TASK_STATES, SATISFYING_TASK_STATES, TaskId, type Task } from '../domain/task.js';

export interface ReplaceTaskInput {
  /** The original with its dependencies and dependents (or every task); never mutated. */
  tasks: readonly Task[];
  /**
   * Ids of every task of the session, when `tasks` holds only the original's neighbourhood:
   * a new id must not be any of them (a plan may hold an `A.r1.1` of its own).
   */
  sessionTaskIds?: readonly string[];
  originalTaskId: string;
  /** The Replanner's subtasks, with the Replanner's own ids. */
  subtasks: readonly PlannedTask[];
  /** Why the task is replanned (the judge's reason); stored on the original and the subtasks. */
  reason: string;
  /** Replan limit of the chain, stored on every subtask (see effectiveMaxReplanIterations). */
  maxIterations: number;
  /** Prefix of the new ids; default `${originalTaskId}.r${iteration}`. */
  idPrefix?: string;
}

export interface ReplaceTaskResult {
  /** The session's tasks after the replacement: the subtasks follow the original. */
  tasks: Task[];
  /** Ids of the subtasks, in the Replanner's order. */
  newTaskIds: string[];
  /** Tasks that depended on the original and now depend on the subtasks. */
  rewiredTaskIds: string[];
  /**
   * Existing tasks whose record changed (the original, the rewired dependents, the original's
   * dependencies whose `dependents` grew), in session order: with newTaskIds, what the store
   * must write.
   */
  changedTaskIds: string[];
}

function invalid(message: string, details: Record<string, unknown>, hint?: string): OrqError {
  return new OrqError('INVALID_STATE', message, { details, hint });
}

/** Finds one cycle among the subtasks (planner ids), or undefined. */
function findCycle(deps: ReadonlyMap<string, readonly string[]>): string[] | undefined {
  const state = new Map<string, 'visiting' | 'done'>();
  const path: string[] = [];
  const visit = (id: string): string[] | undefined => {
    if (state.get(id) === 'done') return undefined;
    if (state.get(id) === 'visiting') return [...path.slice(path.indexOf(id)), id];
    state.set(id, 'visiting');
    path.push(id);
    for (const dep of deps.get(id) ?? []) {
      const cycle = visit(dep);
      if (cycle) return cycle;
    }
    path.pop();
    state.set(id, 'done');
    return undefined;
  };
  for (const id of deps.keys()) {
    const cycle = visit(id);
    if (cycle) return cycle;
  }
  return undefined;
}

/**
 * Seed 001's REPLACED_BY_REPLAN step as a pure function: the original task is replaced by the
 * Replanner's subtasks, and the task graph is rewired around them. Returns new arrays and
 * objects; the input is never mutated.
 *
 * Decisions:
 * - New ids are `${originalId}.r${iteration}.${n}` (n from 1, in the Replanner's order). They
 *   are unique by construction, because the original id is, and a task is replaced at most
 *   once; should one still clash with an existing task, `_2`, `_3`, … is appended. The
 *   Replanner's ids only resolve dependencies among the subtasks (they shadow session ids).
 * - Seed 001 considers "dependencies only among the new tasks": a subtask's dependency on
 *   another subtask is kept, any other id it names is dropped. Every subtask instead inherits
 *   all of the original's dependencies, so nothing of the replacement runs before what the
 *   original needed, and each subtask's worker sees the same upstream results the original
 *   would have seen.
 * - Each task that depended on the original now depends on the subtasks' sinks (those no
 *   other subtask depends on). The dependent needs the whole replacement finished; every
 *   subtask is an ancestor of some sink, so depending on the sinks is equivalent and minimal.
 *   Dependents are rewired whatever their state, so no task is left pointing at a replaced one.
 * - The bookkeeping fields follow the dependency lists: `dependents` stays their reverse (the
 *   original keeps its own dependencies, so its dependencies list it and the subtasks), and
 *   `pendingDependencies` of each subtask and rewired dependent counts its dependencies not
 *   in SATISFYING_TASK_STATES (an unknown id counts as unsatisfied). Unchanged tasks are
 *   returned as the same objects.
 * - The original must exist and not be finished (DONE, REPLACED_BY_REPLAN, SKIPPED,
 *   CANCELLED): replacing a finished task would run work nobody waits for, and a repeated
 *   replan event must not add a second set of subtasks. Subtasks must be non-empty, have
 *   distinct ids and no cycle among themselves. Each violation throws OrqError INVALID_STATE.
 */
export function replaceTaskWithSubtasks(input: ReplaceTaskInput): ReplaceTaskResult {
  const { tasks, originalTaskId, subtasks, reason, maxIterations } = input;

  const originalIndex = tasks.findIndex((t) => t.id === originalTaskId);
  const original = tasks[originalIndex];
  if (!original) {
    throw invalid(
      `Cannot replan task ${originalTaskId}: no such task in the session`,
      { taskId: originalTaskId },
      'The replan event names a task the session does not hold; check the session id.',
    );
  }
  if (FINISHED_TASK_STATES.includes(original.state)) {
    throw invalid(
      `Cannot replan task ${originalTaskId}: it is already ${original.state}`,
      {
        taskId: originalTaskId,
        state: original.state,
        replacedBy: original.replanningInfo?.replacedBy,
      },
      'A finished task is not replaced; a repeated replan event can be ignored.',
    );
  }
  if (subtasks.length === 0) {
    throw invalid(
      `Cannot replan task ${originalTaskId}: the Replanner proposed no subtasks`,
      { taskId: originalTaskId },
      'Ask the Replanner again, or resume the task by hand.',
    );
  }

  const plannerIds = subtasks.map((s) => s.id);
  const duplicates = [...new Set(plannerIds.filter((id, i) => plannerIds.indexOf(id) !== i))];
  if (duplicates.length > 0) {
    throw invalid(
      `Cannot replan task ${originalTaskId}: subtask ids ${duplicates.join(', ')} are used twice`,
      { taskId: originalTaskId, duplicateIds: duplicates },
      'The Replanner must give each subtask its own id; ask it again.',
    );
  }

  // Dependencies among the subtasks, by planner id; everything else is dropped (seed 001).
  const plannerIdSet = new Set(plannerIds);
  const internalDeps = new Map<string, string[]>(
    subtasks.map((s) => [s.id, [...new Set(s.dependencies.filter((d) => plannerIdSet.has(d)))]]),
  );
  const cycle = findCycle(internalDeps);
  if (cycle) {
    throw invalid(
      `Cannot replan task ${originalTaskId}: the subtasks depend on each other in a cycle (${cycle.join(' -> ')})`,
      { taskId: originalTaskId, cycle },
      'Ask the Replanner again for subtasks whose dependencies form no cycle.',
    );
  }

  const iteration = (original.replanningInfo?.iteration ?? 0) + 1;
  const prefix = input.idPrefix ?? `${original.id}.r${iteration}`;
  const taken = new Set([...tasks.map((t) => t.id), ...(input.sessionTaskIds ?? [])]);
  const newIdOf = new Map<string, string>();
  for (const [i, subtask] of subtasks.entries()) {
    const base = `${prefix}.${i + 1}`;
    let id = base;
    for (let k = 2; taken.has(id); k += 1) id = `${base}_${k}`;
    if (!TaskId.safeParse(id).success) {
      throw invalid(
        `Cannot replan task ${originalTaskId}: the subtask id ${id} is not a valid task id`,
        { taskId: originalTaskId, subtaskId: id },
        'Task ids are at most 200 letters, digits and _ . : -; pass a shorter idPrefix.',
      );
    }
    taken.add(id);
    newIdOf.set(subtask.id, id);
  }
  const mapped = (plannerId: string): string => newIdOf.get(plannerId) as string;
  const newTaskIds = plannerIds.map(mapped);

  const rootId = original.replanningInfo?.originalTaskId ?? original.id;
  const dependedOn = new Set([...internalDeps.values()].flat());
  const sinkIds = plannerIds.filter((id) => !dependedOn.has(id)).map(mapped);

  // Dependents of the original, found from the dependency lists (the source of truth).
  const rewiredTaskIds = tasks
    .filter((t) => t.id !== original.id && t.dependencies.includes(original.id))
    .map((t) => t.id);
  const rewired = new Set(rewiredTaskIds);
  const originalDeps = new Set(original.dependencies);

  // State of every task after the replacement, to count unsatisfied dependencies.
  const stateAfter = new Map(tasks.map((t) => [t.id, t.state]));
  stateAfter.set(original.id, 'REPLACED_BY_REPLAN');
  for (const id of newTaskIds) stateAfter.set(id, 'READY');
  const pendingOf = (dependencies: readonly string[]): number =>
    dependencies.filter((d) => {
      const state = stateAfter.get(d);
      return state === undefined || !SATISFYING_TASK_STATES.includes(state);
    }).length;

  const newTasks = subtasks.map((s): Task => {
    const dependencies = [
      ...new Set([...original.dependencies, ...(internalDeps.get(s.id) ?? []).map(mapped)]),
    ];
    const dependents = [
      ...subtasks.filter((o) => internalDeps.get(o.id)?.includes(s.id)).map((o) => mapped(o.id)),
      ...(sinkIds.includes(mapped(s.id)) ? rewiredTaskIds : []),
    ];
    // The Replanner may pick an executor; otherwise a subtask runs where the original would have.
    const executor = s.executor ?? original.executor;
    return {
      id: mapped(s.id),
      title: s.title,
      acceptance: s.acceptance,
      context: s.context,
      scopePaths: [...s.scopePaths],
      dependencies,
      dependents,
      pendingDependencies: pendingOf(dependencies),
      state: 'READY',
      attempts: 0,
      continuations: 0,
      replanPending: false,
      replanningInfo: {
        iteration,
        maxIterations,
        originalTaskId: rootId,
        replanReason: reason,
      },
      ...(executor !== undefined ? { executor } : {}),
    };
  });

  const replacedOriginal: Task = {
    ...original,
    dependencies: [...original.dependencies],
    dependents: original.dependents.filter((d) => !rewired.has(d)),
    state: 'REPLACED_BY_REPLAN',
    replanPending: false,
    replanningInfo: {
      ...(original.replanningInfo ?? { iteration: 0, maxIterations }),
      replacedBy: [...newTaskIds],
      replanReason: reason,
    },
  };

  const changedTaskIds: string[] = [];
  const rest = tasks.map((task): Task => {
    if (task.id === original.id) {
      changedTaskIds.push(task.id);
      return replacedOriginal;
    }
    let updated = task;
    if (originalDeps.has(task.id)) {
      // Each subtask inherits the original's dependencies, so it is a dependent here too.
      updated = { ...updated, dependents: [...new Set([...task.dependents, ...newTaskIds])] };
    }
    if (rewired.has(task.id)) {
      const dependencies = [
        ...new Set(task.dependencies.flatMap((d) => (d === original.id ? sinkIds : [d]))),
      ];
      updated = { ...updated, dependencies, pendingDependencies: pendingOf(dependencies) };
    }
    if (updated !== task) changedTaskIds.push(task.id);
    return updated;
  });

  return {
    tasks: [...rest.slice(0, originalIndex + 1), ...newTasks, ...rest.slice(originalIndex + 1)],
    newTaskIds,
    rewiredTaskIds,
    changedTaskIds,
  };
}
