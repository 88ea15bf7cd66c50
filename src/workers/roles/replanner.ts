import type { Job } from 'bullmq';
import { OrqError, parseOrThrow } from '../../shared/errors.js';
import { jobIds, outboxJob, ReplanJob, withPriorityOf } from '../../shared/queues.js';
import { ReplanBreakdown } from '../../shared/domain/plan.js';
import { checkReply, HANDED_ON, handedOnAlready, type RoleContext, usableCard } from './context.js';
import type { TaskJudgement, TaskResult, Task } from '../../shared/domain/task.js';
import type { TaskCard } from '../../shared/queues.js';
import type { TaskSnapshot } from '../../shared/store/session-records.js';
import { taskFromCard } from '../../shared/task-card.js';

/** The task as the judge's verdict left it, from the replan job's card, verdict and result. */
function heldForReplan(
  card: TaskCard,
  judgement: TaskJudgement | undefined,
  result: TaskResult | undefined,
): Task | undefined {
  const task = taskFromCard(card);
  return task && { ...task, replanPending: true, judgement, result };
}
import { confirmDelivery } from '../delivery.js';

/** Replanner (seed 001): splits a task the Judge says cannot succeed as designed into subtasks. */
export function createReplannerProcessor(ctx: RoleContext) {
  // The signal aborts the model call when a pod shuts down past its timeout (registry close()).
  return async (job: Job, token?: string, shutdown?: AbortSignal): Promise<string> => {
    const data = parseOrThrow(ReplanJob, job.data, 'replan job');
    const eventId = jobIds.taskReplanned(data.sessionId, data.taskId, data.attempt);
    if (await handedOnAlready(ctx, job, 'coordinator', eventId)) return HANDED_ON;
    // With the job's task, verdict and result, the read is a version check: the task is read
    // only if it changed since the judge's verdict was applied (or the result was too long).
    const card = data.judgement && data.result ? usableCard(data) : undefined;
    const { snapshot, tasks, unchanged } = await ctx.store.loadForTask(
      data.sessionId,
      [data.taskId],
      undefined,
      card ? new Map([[data.taskId, card.version]]) : undefined,
    );
    if (!snapshot || snapshot.session.state !== 'RUNNING') return 'session not running';
    const held =
      card && unchanged.has(data.taskId)
        ? heldForReplan(card, data.judgement, data.result)
        : undefined;
    const current = tasks.get(data.taskId);
    if (
      !held &&
      (!current || !current.task.replanPending || current.task.attempts !== data.attempt)
    )
      return 'stale';
    const task = held ?? (current as TaskSnapshot).task;
    const { session } = snapshot;
    const timeoutMs = session.config.replanning.timeoutSeconds * 1000;
    const timeout = AbortSignal.timeout(timeoutMs);
    const signal = shutdown ? AbortSignal.any([timeout, shutdown]) : timeout;
    // Past replanning.timeoutSeconds the call fails with the setting's name, whether the model
    // threw on the abort (as the SDK providers do) or answered anyway.
    const timedOut = (cause?: unknown) =>
      new OrqError(
        'LLM_CALL_FAILED',
        `replanning ${task.id} exceeded ${session.config.replanning.timeoutSeconds}s (replanning.timeoutSeconds)`,
        { details: { sessionId: session.id, taskId: task.id }, ...(cause ? { cause } : {}) },
      );
    const models = await ctx.models.forSession(session, 'replanner');
    const reply = await models
      .replan({
        sessionId: session.id,
        task,
        ...(task.result ? { result: task.result } : {}),
        judgement: task.judgement ?? {
          success: false,
          shouldContinue: false,
          shouldReplan: true,
          reason: '',
          missingRequirements: [],
        },
        iteration: (task.replanningInfo?.iteration ?? 0) + 1,
        instruction: session.instruction,
        requiredTerms: session.requiredTerms.terms,
        executors: session.config.execution,
        signal,
        jobAttempt: job.attemptsMade,
      })
      .catch((error: unknown) => {
        throw timeout.aborted ? timedOut(error) : error;
      });
    if (timeout.aborted) throw timedOut();
    const breakdown = checkReply(ReplanBreakdown, reply.value, 'replan', {
      sessionId: session.id,
      taskId: task.id,
      attempt: data.attempt,
    });
    // Handed on only while the job is still this delivery's (issue 35).
    await confirmDelivery(job, token, ctx.lockDurationMs);
    await ctx.queues.add(
      withPriorityOf(
        job,
        outboxJob('coordinator', 'task-replanned', eventId, {
          sessionId: session.id,
          taskId: task.id,
          attempt: data.attempt,
          breakdown,
        }),
      ),
    );
    return `replanned into ${breakdown.tasks.length}`;
  };
}
