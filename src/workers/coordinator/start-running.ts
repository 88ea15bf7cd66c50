import type { PlanBreakdown, PlannedTask } from '../../shared/domain/plan.js';
import type { HistoryEntryDraft } from '../../shared/domain/history.js';
import type { Session } from '../../shared/domain/session.js';
import { Task } from '../../shared/domain/task.js';
import { criticalPaths } from '../../shared/rules/critical-path.js';
import { enforceExecutorPolicy } from '../../shared/rules/executor-choice.js';
import type { Transition } from './context.js';
import { executorsRefused } from './executors-refused.js';
import { TaskEdits } from './task-edits.js';

/**
 * Where a plan becomes work: the plan the judge accepted (plan-judged.ts) or the one a person
 * approved or edited (plan-approval.ts) is stored as the session's tasks, and the session RUNS.
 */

/** The plan's tasks, each with its dependents and critical path, READY to be dispatched. */
function tasksFromPlan(session: Session, plan: PlanBreakdown): Task[] {
  // A planner may name a dependency twice. Each listed dependency releases the task once when
  // it is done (TaskEdits.releaseDependents), so a repeated one would be counted twice and the
  // task dispatched before its other dependencies: keep each dependency once.
  const planned = plan.tasks.map((t: PlannedTask) => ({
    ...t,
    dependencies: [...new Set(t.dependencies)],
  }));
  const dependents = new Map<string, string[]>();
  for (const t of planned) {
    for (const dep of t.dependencies) dependents.set(dep, [...(dependents.get(dep) ?? []), t.id]);
  }
  const paths = criticalPaths(
    planned.map((t) => ({ id: t.id, dependents: dependents.get(t.id) ?? [] })),
  );
  return planned.map((t) =>
    Task.parse({
      ...t,
      criticalPath: paths.get(t.id) ?? 1,
      state: 'READY',
      dependents: dependents.get(t.id) ?? [],
      pendingDependencies: t.dependencies.length,
      replanningInfo: { iteration: 0, maxIterations: session.config.replanning.maxIterations },
    }),
  );
}

/** The plan's tasks are stored and those with no dependency dispatched: the session RUNS. */
export function startRunning(
  session: Session,
  version: number,
  plan: PlanBreakdown,
  eventId: string,
  history: HistoryEntryDraft[],
  reason: string,
): Transition {
  const policy = session.config.execution;
  const enforced = enforceExecutorPolicy(plan.tasks, policy);
  if (enforced.refused.length > 0) history.push(executorsRefused(enforced.refused, policy));
  const tasks = tasksFromPlan(session, { ...plan, tasks: enforced.tasks });
  const edits = new TaskEdits(session, []);
  for (const task of tasks) edits.put(task, 'plan accepted');
  for (const task of tasks) {
    if (task.pendingDependencies === 0) edits.dispatch(task.id, 'no dependencies');
  }
  // A session's tasks are all new here: none holds a slot or waits for one yet.
  const limit = session.config.scheduling.maxTasksInFlight;
  edits.fillSlots(limit > 0 ? { limit, active: 0, waiting: [] } : undefined);
  const next: Session = {
    ...session,
    state: 'RUNNING',
    updatedAt: new Date().toISOString(),
    taskIds: tasks.map((t) => t.id),
  };
  return {
    changeset: {
      eventId,
      session: { record: next, expectedVersion: version },
      ...(limit > 0 ? { slotLimit: limit } : {}),
      tasks: edits.changes(),
      counters: edits.counterDelta(),
      outbox: edits.outbox,
      history: [
        ...history,
        { type: 'state_change', entity: 'session', from: session.state, to: 'RUNNING', reason },
        ...edits.history,
      ],
    },
  };
}
