import type { Job } from 'bullmq';
import { OrqError, parseOrThrow } from '../../shared/errors.js';
import {
  CheckTaskJob,
  jobIds,
  jobKind,
  JudgePlanJob,
  JudgeTaskJob,
  outboxJob,
  withPriorityOf,
} from '../../shared/queues.js';
import { QualityJudgement } from '../../shared/domain/plan.js';
import { TaskJudgement, TaskResult } from '../../shared/domain/task.js';
import {
  checkReply,
  HANDED_ON,
  handedOnAlready,
  isCurrentExecution,
  type RoleContext,
  usableCard,
} from './context.js';
import type { TaskSnapshot } from '../../shared/store/session-records.js';
import { taskFromCard } from '../../shared/task-card.js';
import { confirmDelivery } from '../delivery.js';
import { judgeResult } from './final-judge.js';

/** Judge: scores plans (quality) and judges task executions (done / continue / replan / blocked). */
export function createJudgeProcessor(ctx: RoleContext) {
  // The signal aborts model calls when a pod shuts down past its timeout (registry close()).
  return async (job: Job, token?: string, signal?: AbortSignal): Promise<string> => {
    if (jobKind(job.name) === 'judge-plan') {
      const data = parseOrThrow(JudgePlanJob, job.data, 'judge-plan job');
      const eventId = jobIds.planJudged(data.sessionId, data.attempt);
      if (await handedOnAlready(ctx, job, 'coordinator', eventId)) return HANDED_ON;
      const snapshot = await ctx.store.loadSession(data.sessionId);
      if (!snapshot) return 'session gone';
      const { session } = snapshot;
      if (session.state !== 'PLANNING' || session.planning.attempt !== data.attempt) return 'stale';
      const reply = await (
        await ctx.models.forSession(session, 'judge')
      ).judgePlan({
        sessionId: session.id,
        instruction: session.instruction,
        attempt: data.attempt,
        plan: data.plan,
        requiredTerms: session.requiredTerms.terms,
        refinementState: {
          previousScore: session.planning.previousScore,
          attemptCount: session.planning.attemptCount,
          suggestionReplanCount: session.planning.suggestionReplanCount,
        },
        jobAttempt: job.attemptsMade,
        ...(signal ? { signal } : {}),
      });
      const judgement = checkReply(QualityJudgement, reply.value, 'plan judgement', {
        sessionId: session.id,
        attempt: data.attempt,
      });
      // Handed on only while the job is still this delivery's (issue 35).
      await confirmDelivery(job, token, ctx.lockDurationMs);
      await ctx.queues.add(
        withPriorityOf(
          job,
          outboxJob('coordinator', 'plan-judged', eventId, {
            sessionId: session.id,
            attempt: data.attempt,
            plan: data.plan,
            judgement,
          }),
        ),
      );
      return `plan score ${judgement.score ?? 'n/a'}`;
    }
    if (jobKind(job.name) === 'check-task') return checkBeforeRun(ctx, job, token, signal);
    if (jobKind(job.name) === 'judge-result') return judgeResult(ctx, job, token, signal);
    const data = parseOrThrow(JudgeTaskJob, job.data, 'judge-task job');
    // Per work delivery (its fence): the verdict on a superseded delivery's result, which the
    // coordinator refuses, must not take the id of the verdict on the current one's.
    const jobId = jobIds.judgeTask(data.sessionId, data.taskId, data.attempt, data.fence);
    const eventId = jobIds.taskJudged(data.sessionId, data.taskId, data.attempt, data.fence);
    if (await handedOnAlready(ctx, job, 'coordinator', eventId)) return HANDED_ON;
    // This read counts the execution's usage, once per job however often the job runs. With
    // the job's task card it is a version check: the task is read only if it changed since.
    const card = usableCard(data);
    const { snapshot, tasks, unchanged } = await ctx.store.loadForTask(
      data.sessionId,
      [data.taskId],
      data.unsettledUsage ? { id: `usage|${jobId}`, usage: data.unsettledUsage } : undefined,
      card ? new Map([[data.taskId, card.version]]) : undefined,
    );
    if (!snapshot || snapshot.session.state !== 'RUNNING') return 'session not running';
    const held = card && unchanged.has(data.taskId) ? taskFromCard(card) : undefined;
    const read = tasks.get(data.taskId);
    if (!held && (!read || !isCurrentExecution(read.task, data.attempt))) return 'stale';
    const task = { task: held ?? (read as TaskSnapshot).task };
    const result = data.result ?? (await storedResult(ctx, data));
    // The judge's own usage goes on with its verdict: the coordinator's write counts it.
    return ctx.models.withUsageTally(data.sessionId, async (usageTally) => {
      const reply = await (
        await ctx.models.forSession(snapshot.session, 'judge')
      ).judgeTask({
        sessionId: data.sessionId,
        task: task.task,
        attempt: data.attempt,
        result,
        instruction: snapshot.session.instruction,
        jobAttempt: job.attemptsMade,
        usageTally,
        ...(signal ? { signal } : {}),
      });
      const judgement = checkReply(TaskJudgement, reply.value, 'task judgement', {
        sessionId: data.sessionId,
        taskId: data.taskId,
        attempt: data.attempt,
      });
      // Handed on only while the job is still this delivery's (issue 35).
      await confirmDelivery(job, token, ctx.lockDurationMs);
      await ctx.queues.add(
        withPriorityOf(
          job,
          outboxJob('coordinator', 'task-judged', eventId, {
            sessionId: data.sessionId,
            taskId: data.taskId,
            attempt: data.attempt,
            // A stored result stays a reference: the coordinator reads it where it records it.
            ...(data.result ? { result: data.result } : { storedResult: true as const }),
            judgement,
            ...usageTally.field(),
            ...(data.fence ? { fence: data.fence } : {}),
          }),
        ),
      );
      usageTally.passedOn();
      return judgement.success ? 'success' : 'not yet';
    });
  };
}

/**
 * judging.checkAlreadySatisfied (issue 50): asks the judge whether a task about to run for the
 * first time is met already, from its dependencies' outputs, and hands the answer to the
 * coordinator (task-checked.ts), which skips the task or sends it to a worker.
 */
async function checkBeforeRun(
  ctx: RoleContext,
  job: Job,
  token: string | undefined,
  signal: AbortSignal | undefined,
): Promise<string> {
  const data = parseOrThrow(CheckTaskJob, job.data, 'check-task job');
  const eventId = jobIds.taskChecked(data.sessionId, data.taskId);
  if (await handedOnAlready(ctx, job, 'coordinator', eventId)) return HANDED_ON;
  const { snapshot, tasks } = await ctx.store.loadForTask(data.sessionId, [data.taskId]);
  if (!snapshot || snapshot.session.state !== 'RUNNING') return 'session not running';
  const task = tasks.get(data.taskId)?.task;
  if (
    !task ||
    task.state !== 'RUNNING' ||
    task.attempts !== 1 ||
    task.checkedBeforeRun !== undefined
  ) {
    return 'stale';
  }
  const dependencies = await ctx.store.loadTasks(data.sessionId, task.dependencies);
  const dependencyResults = task.dependencies.flatMap((id) => {
    const dep = dependencies.get(id)?.task;
    return dep?.result ? [{ taskId: id, title: dep.title, output: dep.result.output }] : [];
  });
  return ctx.models.withUsageTally(data.sessionId, async (usageTally) => {
    const reply = await (
      await ctx.models.forSession(snapshot.session, 'judge')
    ).judgeTask({
      sessionId: data.sessionId,
      task,
      attempt: 0,
      // Nothing has run yet: an empty result, the schema's defaults.
      result: TaskResult.parse({ output: '' }),
      instruction: snapshot.session.instruction,
      beforeRun: { dependencyResults },
      jobAttempt: job.attemptsMade,
      usageTally,
      ...(signal ? { signal } : {}),
    });
    const judgement = checkReply(TaskJudgement, reply.value, 'task check', {
      sessionId: data.sessionId,
      taskId: data.taskId,
    });
    await confirmDelivery(job, token, ctx.lockDurationMs);
    await ctx.queues.add(
      withPriorityOf(
        job,
        outboxJob('coordinator', 'task-checked', eventId, {
          sessionId: data.sessionId,
          taskId: data.taskId,
          ...(data.attempt !== undefined ? { attempt: data.attempt } : {}),
          judgement,
          ...usageTally.field(),
        }),
      ),
    );
    usageTally.passedOn();
    return judgement.alreadySatisfied ? 'already satisfied' : 'to run';
  });
}

/** The result a judge job references (storedResult), as its worker stored it. */
async function storedResult(ctx: RoleContext, data: JudgeTaskJob): Promise<TaskResult> {
  const result = await ctx.store.loadResult(data.sessionId, data.taskId, data.attempt, data.fence);
  if (result) return result;
  throw new OrqError(
    'NOT_FOUND',
    `the result of attempt ${data.attempt} of task ${data.taskId} is not in the store`,
    {
      details: { sessionId: data.sessionId, taskId: data.taskId, attempt: data.attempt },
      hint: 'Its worker stores a long result before it hands it on; the session may have been deleted since',
    },
  );
}
