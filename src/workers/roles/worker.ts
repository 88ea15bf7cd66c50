import type { Job } from 'bullmq';
import { parseOrThrow } from '../../shared/errors.js';
import type { DependencyResult } from '../../shared/llm/types.js';
import { ExecuteJob, jobIds, outboxJob } from '../../shared/queues.js';
import type { RoleContext } from './context.js';

/** Worker: executes one task with the results of its dependencies, hands the result to the Judge. */
export function createWorkerProcessor(ctx: RoleContext) {
  return async (job: Job): Promise<string> => {
    const data = parseOrThrow(ExecuteJob, job.data, 'execute job');
    const snapshot = await ctx.store.loadSession(data.sessionId);
    if (!snapshot || snapshot.session.state !== 'RUNNING') return 'session not running';
    const current = await ctx.store.loadTask(data.sessionId, data.taskId);
    if (!current || current.task.attempts !== data.attempt) return 'stale';
    const task = current.task;
    const deps = await ctx.store.loadTasks(data.sessionId, task.dependencies);
    const dependencyResults: DependencyResult[] = task.dependencies.flatMap((id) => {
      const dep = deps.get(id)?.task;
      return dep?.result ? [{ taskId: id, title: dep.title, output: dep.result.output }] : [];
    });
    const started = Date.now();
    const result = await (
      await ctx.models.forSession(snapshot.session, 'worker')
    ).execute({
      sessionId: data.sessionId,
      task,
      attempt: data.attempt,
      dependencyResults,
      ...(task.feedback ? { feedback: task.feedback } : {}),
      instruction: snapshot.session.instruction,
      jobAttempt: job.attemptsMade,
    });
    await ctx.queues.add(
      outboxJob(
        'judge',
        'judge-task',
        jobIds.judgeTask(data.sessionId, data.taskId, data.attempt),
        {
          sessionId: data.sessionId,
          taskId: data.taskId,
          attempt: data.attempt,
          result: { ...result, durationMs: result.durationMs || Date.now() - started },
        },
      ),
    );
    return 'executed';
  };
}
