/**
 * Which executor a planned task may name for itself. The operator picks the session's executor
 * (execution.defaultExecutor) and the ones a task may choose instead (execution.taskExecutors);
 * a plan is model output that an instruction can steer, so any other choice is taken out of the
 * task, which then runs on the default. Pure: the coordinator records what it took out.
 */

export interface ExecutorPolicy {
  defaultExecutor: string;
  taskExecutors: readonly string[];
}

/** A task's executor that the session does not let a task choose. */
export interface RefusedExecutor {
  taskId: string;
  executor: string;
}

export function executorAllowed(executor: string, policy: ExecutorPolicy): boolean {
  return executor === policy.defaultExecutor || policy.taskExecutors.includes(executor);
}

/** `tasks` with every executor the policy refuses taken out, and what was taken out. */
export function enforceExecutorPolicy<T extends { id: string; executor?: string | undefined }>(
  tasks: readonly T[],
  policy: ExecutorPolicy,
): { tasks: T[]; refused: RefusedExecutor[] } {
  const refused: RefusedExecutor[] = [];
  const kept = tasks.map((task) => {
    if (task.executor === undefined || executorAllowed(task.executor, policy)) return task;
    refused.push({ taskId: task.id, executor: task.executor });
    const { executor: _refused, ...rest } = task;
    return rest as T;
  });
  return { tasks: kept, refused };
}

/** Where a task whose choice was refused runs: the session's default executor. */
function defaultExecutorPhrase(policy: ExecutorPolicy): string {
  return `"${policy.defaultExecutor}" (execution.defaultExecutor)`;
}

/**
 * The reason recorded for refused choices, naming the setting that would allow them; `runsOn`
 * says where those tasks run instead (defaultExecutorPhrase, or a replaced task's executor).
 */
export function refusedExecutorsReason(
  refused: readonly RefusedExecutor[],
  policy: ExecutorPolicy,
  runsOn = defaultExecutorPhrase(policy),
): string {
  const choices = refused.map((r) => `${r.taskId} named "${r.executor}"`).join(', ');
  const rule =
    policy.taskExecutors.length > 0
      ? `tasks may choose only ${policy.taskExecutors.join(', ')} (execution.taskExecutors)`
      : 'tasks may not choose an executor (execution.taskExecutors is empty)';
  return `${choices}, but ${rule}; they run on ${runsOn}`;
}
