import type { Job } from 'bullmq';
import { TaskJudgement, TaskResult } from '../../shared/domain/task.js';
import { parseOrThrow } from '../../shared/errors.js';
import { jobIds, JudgeResultJob, outboxJob, withPriorityOf } from '../../shared/queues.js';
import { finalJudgementInput, resultTask } from '../../shared/rules/final-judgement.js';
import { confirmDelivery } from '../delivery.js';
import { checkReply, HANDED_ON, handedOnAlready, type RoleContext } from './context.js';

/**
 * The final judgement of an integration round (issue 47): the judge sees the instruction, its
 * required terms (seed 002), the result branch's diff stat and its checks, and says done or
 * names what is missing. The coordinator (final-judgement.ts) completes the session or turns
 * what is missing into tasks.
 */
export async function judgeResult(
  ctx: RoleContext,
  job: Job,
  token: string | undefined,
  signal: AbortSignal | undefined,
): Promise<string> {
  const data = parseOrThrow(JudgeResultJob, job.data, 'judge-result job');
  const eventId = jobIds.resultJudged(data.sessionId, data.round);
  if (await handedOnAlready(ctx, job, 'coordinator', eventId)) return HANDED_ON;
  const snapshot = await ctx.store.loadSession(data.sessionId);
  if (!snapshot) return 'session gone';
  const { session } = snapshot;
  const integration = session.integration;
  const outcome = integration?.outcome;
  if (
    session.state !== 'INTEGRATING' ||
    integration?.round !== data.round ||
    integration.phase !== 'judging' ||
    !outcome?.commit
  ) {
    return 'stale';
  }
  return ctx.models.withUsageTally(data.sessionId, async (usageTally) => {
    const reply = await (
      await ctx.models.forSession(session, 'judge')
    ).judgeTask({
      sessionId: session.id,
      task: resultTask(session.instruction, outcome, data.round),
      attempt: 1,
      result: TaskResult.parse({ output: outcome.diffStat }),
      instruction: session.instruction,
      finalJudgement: finalJudgementInput(outcome, data.round, session.requiredTerms.terms),
      jobAttempt: job.attemptsMade,
      usageTally,
      ...(signal ? { signal } : {}),
    });
    const judgement = checkReply(TaskJudgement, reply.value, 'final judgement', {
      sessionId: session.id,
      round: data.round,
    });
    await confirmDelivery(job, token, ctx.lockDurationMs);
    await ctx.queues.add(
      withPriorityOf(
        job,
        outboxJob('coordinator', 'result-judged', eventId, {
          sessionId: session.id,
          round: data.round,
          judgement,
          ...usageTally.field(),
        }),
      ),
    );
    usageTally.passedOn();
    return judgement.success ? 'done' : 'missing';
  });
}
