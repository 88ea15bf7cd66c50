import type { Task } from '../../shared/domain/task.js';
import { OrqError } from '../../shared/errors.js';
import type { TaskReplannedEvent } from '../../shared/queues.js';
import { enforceExecutorPolicy } from '../../shared/rules/executor-choice.js';
import { replaceTaskWithSubtasks } from '../../shared/rules/replace-task.js';
import { taskCapProblem, validateReplacementTerms } from '../../shared/rules/structure.js';
import type { CoordinatorContext, Transition } from './context.js';
import { ignore } from './context.js';
import { executorsRefused } from './executors-refused.js';
import { isSatisfying, taskChangeset, TaskEdits } from './task-edits.js';
import { criticalPaths } from '../../shared/rules/critical-path.js';

/**
 * Seed 001: the Replanner's subtasks replace the task. The original becomes REPLACED_BY_REPLAN,
 * its dependents wait for the new subtasks instead, and subtasks with nothing to wait for run.
 */
export async function onTaskReplanned(
  ctx: CoordinatorContext,
  event: TaskReplannedEvent,
  eventId: string,
): Promise<Transition> {
  const read = await ctx.store.requireForTask(event.sessionId, [event.taskId]);
  const { session } = read.snapshot;
  if (session.state !== 'RUNNING') return ignore(eventId, `session is ${session.state}`);
  const snapshot = read.tasks.get(event.taskId);
  if (!snapshot) return ignore(eventId, `task ${event.taskId} is unknown`);
  const original = snapshot.task;
  if (!original.replanPending || original.attempts !== event.attempt) {
    return ignore(eventId, `stale replan of ${original.id} for attempt ${event.attempt}`);
  }

  const related = await ctx.store.loadTasks(event.sessionId, [
    ...original.dependents,
    ...original.dependencies,
  ]);
  const edits = new TaskEdits(session, [snapshot, ...related.values()]);
  edits.history.push({
    type: 'plan',
    source: 'replanner',
    taskId: original.id,
    attempt: event.attempt,
    plan: { summary: event.breakdown.reason, tasks: event.breakdown.tasks },
  });

  const policy = session.config.execution;
  const enforced = enforceExecutorPolicy(event.breakdown.tasks, policy);
  if (enforced.refused.length > 0) {
    // A subtask without an executor of its own inherits the replaced task's (replace-task.ts).
    const runsOn = original.executor ? `"${original.executor}", as ${original.id} did` : undefined;
    edits.history.push({
      ...executorsRefused(enforced.refused, policy, runsOn),
      taskId: original.id,
    });
  }

  // The subtasks are refused, and the task BLOCKED for a person to decide, with the reason.
  const unusable = async (
    problem: string,
    inputs: Record<string, unknown> = {},
  ): Promise<Transition> => {
    const reason = `the Replanner's subtasks for ${original.id} are unusable: ${problem}`;
    edits.history.push({
      type: 'decision',
      taskId: original.id,
      decision: 'replan:invalid',
      reason,
      inputs,
    });
    edits.put({ ...original, state: 'BLOCKED', replanPending: false }, reason);
    return { changeset: await taskChangeset(ctx.store, eventId, edits, session) };
  };

  const tooMany = taskCapProblem({
    held: session.taskIds.length,
    added: enforced.tasks.length,
    maxTasks: session.config.budget.maxTasks,
  });
  if (tooMany) return unusable(tooMany, { maxTasks: session.config.budget.maxTasks });

  // Seed 002 for task replans: the terms this task carried must survive in its subtasks.
  const terms = validateReplacementTerms(
    session.requiredTerms,
    original,
    enforced.tasks,
    session.config.refinement,
  );
  if (terms.problem) return unusable(terms.problem, { termPreservation: terms.termPreservation });
  if (terms.hasTermLoss) {
    edits.history.push({
      type: 'decision',
      taskId: original.id,
      decision: 'terms:warning',
      reason: `required terms missing after the replan of ${original.id}: ${terms.termPreservation?.missing.join(', ')}`,
      inputs: { termPreservation: terms.termPreservation },
    });
  }

  let replaced: ReturnType<typeof replaceTaskWithSubtasks>;
  try {
    replaced = replaceTaskWithSubtasks({
      tasks: [original, ...[...related.values()].map((s) => s.task)],
      sessionTaskIds: session.taskIds,
      originalTaskId: original.id,
      subtasks: enforced.tasks,
      reason: event.breakdown.reason || original.judgement?.reason || 'judge asked for a replan',
      maxIterations:
        original.replanningInfo?.maxIterations ?? session.config.replanning.maxIterations,
    });
  } catch (error) {
    if (!(error instanceof OrqError)) throw error;
    return unusable(error.message);
  }

  const byId = new Map(replaced.tasks.map((t) => [t.id, t]));
  const newIds = new Set(replaced.newTaskIds);
  const subtasks = replaced.newTaskIds.map((id) => byId.get(id) as Task);
  // Dependents of each subtask among the subtasks, for O(out-degree) release later.
  const subDependents = new Map<string, string[]>();
  for (const sub of subtasks) {
    for (const dep of sub.dependencies) {
      if (newIds.has(dep)) subDependents.set(dep, [...(subDependents.get(dep) ?? []), sub.id]);
    }
  }
  const stateOf = (id: string) =>
    newIds.has(id) ? 'READY' : edits.has(id) ? edits.get(id).state : 'DONE';
  const withDependents = subtasks.map((sub) => ({
    sub,
    dependents: [
      ...(subDependents.get(sub.id) ?? []),
      ...replaced.rewiredTaskIds.filter((d) => byId.get(d)?.dependencies.includes(sub.id)),
    ],
  }));
  // Only the subtasks' paths are new: every task before them in a chain is a dependency of the
  // replaced task, which ran, so it is done, and it is never dispatched again.
  const paths = criticalPaths(
    withDependents.map(({ sub, dependents }) => ({ id: sub.id, dependents })),
    new Map(replaced.rewiredTaskIds.map((id) => [id, edits.get(id).criticalPath ?? 1])),
  );
  for (const { sub, dependents } of withDependents) {
    edits.put(
      {
        ...sub,
        dependents,
        pendingDependencies: sub.dependencies.filter((d) => !isSatisfying(stateOf(d))).length,
        criticalPath: paths.get(sub.id) ?? 1,
      },
      `replaces ${original.id}`,
    );
  }
  edits.put(byId.get(original.id) as Task, `replaced by ${replaced.newTaskIds.join(', ')}`);
  for (const id of replaced.rewiredTaskIds) {
    const before = edits.get(id);
    const after = byId.get(id) as Task;
    // The original counted as one pending dependency; the new subtasks it now waits for replace it.
    const added = after.dependencies.filter((d) => newIds.has(d)).length;
    edits.put({
      ...before,
      dependencies: after.dependencies,
      pendingDependencies: before.pendingDependencies - 1 + added,
    });
  }
  edits.history.push({
    type: 'decision',
    taskId: original.id,
    decision: 'replan:applied',
    reason: `${original.id} replaced by ${replaced.newTaskIds.join(', ')}`,
    inputs: { newTaskIds: replaced.newTaskIds, rewiredTaskIds: replaced.rewiredTaskIds },
  });
  for (const sub of subtasks) {
    if (edits.get(sub.id).pendingDependencies === 0) edits.dispatch(sub.id, 'replan subtask ready');
  }

  const snapshotSession = await ctx.store.requireSession(event.sessionId);
  return {
    changeset: await taskChangeset(ctx.store, eventId, edits, session, {
      record: {
        ...snapshotSession.session,
        taskIds: [...snapshotSession.session.taskIds, ...replaced.newTaskIds],
        updatedAt: new Date().toISOString(),
      },
      expectedVersion: snapshotSession.version,
    }),
  };
}
