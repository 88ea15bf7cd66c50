import type { Job } from 'bullmq';
import { parseOrThrow } from '../../shared/errors.js';
import { jobIds, JudgePlanJob, JudgeTaskJob, outboxJob } from '../../shared/queues.js';
import { QualityJudgement } from '../../shared/domain/plan.js';
import { TaskJudgement } from '../../shared/domain/task.js';
import {
  checkReply,
  HANDED_ON,
  handedOnAlready,
  isCurrentExecution,
  type RoleContext,
} from './context.js';

/** Judge: scores plans (quality) and judges task executions (done / continue / replan / blocked). */
export function createJudgeProcessor(ctx: RoleContext) {
  // The signal aborts model calls when a pod shuts down past its timeout (registry close()).
  return async (job: Job, _token?: string, signal?: AbortSignal): Promise<string> => {
    if (job.name === 'judge-plan') {
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
        jobAttempt: job.attemptsMade,
        ...(signal ? { signal } : {}),
      });
      const judgement = checkReply(QualityJudgement, reply.value, 'plan judgement', {
        sessionId: session.id,
        attempt: data.attempt,
      });
      await ctx.queues.add(
        outboxJob('coordinator', 'plan-judged', eventId, {
          sessionId: session.id,
          attempt: data.attempt,
          plan: data.plan,
          judgement,
        }),
      );
      return `plan score ${judgement.score ?? 'n/a'}`;
    }
    const data = parseOrThrow(JudgeTaskJob, job.data, 'judge-task job');
    const jobId = jobIds.judgeTask(data.sessionId, data.taskId, data.attempt);
    const eventId = jobIds.taskJudged(data.sessionId, data.taskId, data.attempt);
    if (await handedOnAlready(ctx, job, 'coordinator', eventId)) return HANDED_ON;
    // This read counts the execution's usage, once per job however often the job runs.
    const { snapshot, tasks } = await ctx.store.loadForTask(
      data.sessionId,
      [data.taskId],
      data.unsettledUsage ? { id: `usage|${jobId}`, usage: data.unsettledUsage } : undefined,
    );
    const task = tasks.get(data.taskId);
    if (!snapshot || snapshot.session.state !== 'RUNNING') return 'session not running';
    if (!task || !isCurrentExecution(task.task, data.attempt)) return 'stale';
    // The judge's own usage goes on with its verdict: the coordinator's write counts it.
    return ctx.models.withUsageTally(data.sessionId, async (usageTally) => {
      const reply = await (
        await ctx.models.forSession(snapshot.session, 'judge')
      ).judgeTask({
        sessionId: data.sessionId,
        task: task.task,
        attempt: data.attempt,
        result: data.result,
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
      await ctx.queues.add(
        outboxJob('coordinator', 'task-judged', eventId, {
          sessionId: data.sessionId,
          taskId: data.taskId,
          attempt: data.attempt,
          result: data.result,
          judgement,
          ...usageTally.field(),
        }),
      );
      usageTally.passedOn();
      return judgement.success ? 'success' : 'not yet';
    });
  };
}
