import type { Job } from 'bullmq';
import { OrqError, parseOrThrow } from '../../shared/errors.js';
import type { DependencyResult } from '../../shared/llm/types.js';
import { ExecuteJob, jobIds, outboxJob } from '../../shared/queues.js';
import type { ProgressUpdate, TaskProgress } from '../../shared/domain/progress.js';
import { TaskResult } from '../../shared/domain/task.js';
import { createExecutorRegistry, type ExecutorRegistry } from '../executors/registry.js';
import { reportingProgress, storeStepHistory } from '../executors/step-history.js';
import {
  checkReply,
  HANDED_ON,
  handedOnAlready,
  isCurrentExecution,
  type RoleContext,
} from './context.js';

/** Worker: executes one task with the results of its dependencies, hands the result to the Judge. */
export function createWorkerProcessor(
  ctx: RoleContext,
  executors: ExecutorRegistry = createExecutorRegistry(),
) {
  return async (job: Job, _token?: string, signal?: AbortSignal): Promise<string> => {
    const data = parseOrThrow(ExecuteJob, job.data, 'execute job');
    const judgeJobId = jobIds.judgeTask(data.sessionId, data.taskId, data.attempt);
    if (await handedOnAlready(ctx, job, 'judge', judgeJobId)) return HANDED_ON;
    const { snapshot, tasks } = await ctx.store.loadForTask(data.sessionId, [
      data.taskId,
      ...(data.dependencies ?? []),
    ]);
    const current = tasks.get(data.taskId);
    if (!snapshot || snapshot.session.state !== 'RUNNING') return 'session not running';
    if (!current || !isCurrentExecution(current.task, data.attempt)) return 'stale';
    const task = current.task;
    const unread = task.dependencies.filter((id) => !tasks.has(id));
    const deps =
      unread.length > 0
        ? new Map([...tasks, ...(await ctx.store.loadTasks(data.sessionId, unread))])
        : tasks;
    const dependencyResults: DependencyResult[] = task.dependencies.flatMap((id) => {
      const dep = deps.get(id)?.task;
      return dep?.result ? [{ taskId: id, title: dep.title, output: dep.result.output }] : [];
    });
    const started = Date.now();
    const executor = executors.resolve(task, snapshot.session);
    const logger = ctx.logger.child({
      role: 'worker',
      sessionId: data.sessionId,
      taskId: data.taskId,
      executor: executor.name,
    });
    // One signal for the whole execution: BullMQ's (shutdown) or the session finishing.
    const controls = ctx.models.forExecution(snapshot.session, data.taskId, signal);
    const progress = (update: ProgressUpdate) => {
      const value: TaskProgress = {
        ...update,
        attempt: data.attempt,
        at: new Date().toISOString(),
      };
      job.updateProgress(value).catch((error: unknown) => {
        logger.debug(
          { err: error instanceof Error ? error.message : String(error) },
          'progress not stored',
        );
      });
    };
    // The session's end stopped this execution. Quietly, unless the session runs again by now
    // (a BUDGET_EXHAUSTED session resumed): then the job is tried again, or the task would be
    // left RUNNING with no execution and the session would never end.
    const stoppedBySessionEnd = async (): Promise<string> => {
      const now = await ctx.store.loadSession(data.sessionId);
      if (now?.session.state !== 'RUNNING') return 'session not running';
      throw new OrqError(
        'INVALID_STATE',
        `execution of ${data.taskId} was stopped by an end of session ${data.sessionId}, which runs again; retrying it`,
        { details: { sessionId: data.sessionId, taskId: data.taskId, attempt: data.attempt } },
      );
    };
    // The execution's usage goes on with its result to the judge, whose read counts it.
    return ctx.models.withUsageTally(data.sessionId, async (usageTally) => {
      let reply: unknown;
      try {
        reply = await executor.execute({
          session: snapshot.session,
          task,
          attempt: data.attempt,
          dependencyResults,
          ...(task.feedback ? { feedback: task.feedback } : {}),
          models: await ctx.models.forSession(snapshot.session, 'worker'),
          usageTally,
          meterChat: controls.meterChat,
          history: reportingProgress(
            storeStepHistory(ctx.store, snapshot.session, data.taskId, data.attempt),
            progress,
          ),
          progress,
          signal: controls.signal,
          logger,
          jobAttempt: job.attemptsMade,
        });
      } catch (error) {
        // Stopped because the session finished: nothing failed that the coordinator must hear of.
        if (!controls.sessionFinished()) throw error;
        logger.info(
          { err: error instanceof Error ? error.message : String(error) },
          'execution stopped: the session finished',
        );
        return stoppedBySessionEnd();
      } finally {
        controls.release();
      }
      if (controls.sessionFinished()) return stoppedBySessionEnd();
      const result = checkReply(TaskResult, reply, 'execution result', {
        sessionId: data.sessionId,
        taskId: data.taskId,
        attempt: data.attempt,
      });
      await ctx.queues.add(
        outboxJob('judge', 'judge-task', judgeJobId, {
          sessionId: data.sessionId,
          taskId: data.taskId,
          attempt: data.attempt,
          result: { ...result, durationMs: result.durationMs || Date.now() - started },
          ...usageTally.field(),
        }),
      );
      usageTally.passedOn();
      return 'executed';
    });
  };
}
