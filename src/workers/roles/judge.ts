import type { Job } from 'bullmq';
import { parseOrThrow } from '../../shared/errors.js';
import { jobIds, JudgePlanJob, JudgeTaskJob, outboxJob } from '../../shared/queues.js';
import type { RoleContext } from './context.js';

/** Judge: scores plans (quality) and judges task executions (done / continue / replan / blocked). */
export function createJudgeProcessor(ctx: RoleContext) {
  return async (job: Job): Promise<string> => {
    if (job.name === 'judge-plan') {
      const data = parseOrThrow(JudgePlanJob, job.data, 'judge-plan job');
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
      });
      await ctx.queues.add(
        outboxJob('coordinator', 'plan-judged', jobIds.planJudged(session.id, data.attempt), {
          sessionId: session.id,
          attempt: data.attempt,
          plan: data.plan,
          judgement: reply.value,
        }),
      );
      return `plan score ${reply.value.score ?? 'n/a'}`;
    }
    const data = parseOrThrow(JudgeTaskJob, job.data, 'judge-task job');
    const snapshot = await ctx.store.loadSession(data.sessionId);
    if (!snapshot || snapshot.session.state !== 'RUNNING') return 'session not running';
    const task = await ctx.store.loadTask(data.sessionId, data.taskId);
    if (!task || task.task.attempts !== data.attempt) return 'stale';
    const reply = await (
      await ctx.models.forSession(snapshot.session, 'judge')
    ).judgeTask({
      sessionId: data.sessionId,
      task: task.task,
      attempt: data.attempt,
      result: data.result,
      instruction: snapshot.session.instruction,
      jobAttempt: job.attemptsMade,
    });
    await ctx.queues.add(
      outboxJob(
        'coordinator',
        'task-judged',
        jobIds.taskJudged(data.sessionId, data.taskId, data.attempt),
        {
          sessionId: data.sessionId,
          taskId: data.taskId,
          attempt: data.attempt,
          result: data.result,
          judgement: reply.value,
        },
      ),
    );
    return reply.value.success ? 'success' : 'not yet';
  };
}
