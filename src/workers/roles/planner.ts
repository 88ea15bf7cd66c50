import type { Job } from 'bullmq';
import { parseOrThrow } from '../../shared/errors.js';
import { jobIds, outboxJob, PlanJob, withPriorityOf } from '../../shared/queues.js';
import { PlanBreakdown } from '../../shared/domain/plan.js';
import { checkReply, HANDED_ON, handedOnAlready, type RoleContext } from './context.js';
import { confirmDelivery } from '../delivery.js';

/** Planner: instruction (and, on a replan, the previous plan and the judge's feedback) → plan. */
export function createPlannerProcessor(ctx: RoleContext) {
  // The signal aborts model calls when a pod shuts down past its timeout (registry close()).
  return async (job: Job, token?: string, signal?: AbortSignal): Promise<string> => {
    const data = parseOrThrow(PlanJob, job.data, 'plan job');
    const judgeJobId = jobIds.judgePlan(data.sessionId, data.attempt);
    if (await handedOnAlready(ctx, job, 'judge', judgeJobId)) return HANDED_ON;
    const snapshot = await ctx.store.loadSession(data.sessionId);
    if (!snapshot) return 'session gone';
    const { session } = snapshot;
    if (session.state !== 'PLANNING' || session.planning.attempt !== data.attempt) return 'stale';
    // The session counts for its tenant in fair release from now, not from its first release:
    // its tenant's other sessions released meanwhile then share with it, instead of taking
    // their whole share each (fair-release.ts). Ordering only: a failure costs no plan.
    await ctx.queues.fair.release(session.id, session.tenant, 0).catch(() => undefined);
    const reply = await (
      await ctx.models.forSession(session, 'planner')
    ).plan({
      sessionId: session.id,
      instruction: session.instruction,
      attempt: data.attempt,
      requiredTerms: session.requiredTerms.terms,
      ...(session.planning.previousPlan ? { previousPlan: session.planning.previousPlan } : {}),
      ...(data.feedback ? { feedback: data.feedback } : {}),
      config: session.config,
      jobAttempt: job.attemptsMade,
      ...(signal ? { signal } : {}),
    });
    const plan = checkReply(PlanBreakdown, reply.value, 'plan', {
      sessionId: session.id,
      attempt: data.attempt,
    });
    // Handed on only while the job is still this delivery's (issue 35).
    await confirmDelivery(job, token, ctx.lockDurationMs);
    await ctx.queues.add(
      withPriorityOf(
        job,
        outboxJob('judge', 'judge-plan', judgeJobId, {
          sessionId: session.id,
          attempt: data.attempt,
          plan,
          usage: reply.usage,
        }),
      ),
    );
    return `planned ${plan.tasks.length} tasks`;
  };
}
