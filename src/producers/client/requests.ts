/**
 * What a client asks of orq: submit a session, resume, cancel or answer it, delete or prune
 * finished ones. A request about a running session is checked against the session as it is,
 * enqueued for the coordinator through the outbox, and (resume, answer) followed in the
 * session's history until the coordinator applied it.
 */
import { randomUUID } from 'node:crypto';
import { z } from 'zod';
import { inSpan, SpanKind } from '../../shared/tracing/trace.js';
import type { PlanBreakdown } from '../../shared/domain/plan.js';
import type { HistoryEntry } from '../../shared/domain/history.js';
import {
  WaitAnswer,
  WaitId,
  type HumanWait,
  type WaitAnswerInput,
} from '../../shared/domain/human-wait.js';
import { FINISHED_SESSION_STATES, SessionId, type Session } from '../../shared/domain/session.js';
import { TaskId } from '../../shared/domain/task.js';
import { OrqError, parseOrThrow, WaitEndedError } from '../../shared/errors.js';
import { jobIds, outboxJob, ROLE_QUEUE, type OutboxJob } from '../../shared/queues.js';
import { markRequestPending } from '../../shared/store/pending-resumes.js';
import { sessionNotFound } from '../../shared/store/session-reads.js';
import {
  deleteSession,
  pruneSessions,
  type DeletedSession,
  type PruneReport,
} from '../../shared/store/session-retention.js';
import type { ClientContext } from './context.js';
import { checkBudgetWithinConfig, checkResumable } from './resume-checks.js';
import {
  CancelReason,
  PruneRequest,
  ResumeRequest,
  type AnswerOptions,
  type AnswerOutcome,
  type PlanBreakdownInput,
  type SubmitOptions,
  type SubmitOutcome,
  type SubmitRequest,
} from './schemas.js';
import { submitSession } from './submit.js';
import { budgetStoppedQuestion, openWaitFor } from './wait-lookup.js';
import type { SessionWatcher } from './watching.js';

/** BullMQ job states of a job no worker has taken yet: removing one means it never runs. */
const UNTAKEN_JOB_STATES: readonly string[] = [
  'waiting',
  'delayed',
  'prioritized',
  'waiting-children',
];

/** How long resume and answer wait for the coordinator to apply them, unless told. */
const APPLY_WAIT_MS = 5_000;

export class SessionRequests {
  constructor(
    private readonly context: ClientContext,
    private readonly watcher: SessionWatcher,
  ) {}

  async submit(request: SubmitRequest, options?: SubmitOptions): Promise<Session> {
    return (await this.submitWithOutcome(request, options)).session;
  }

  submitWithOutcome(request: SubmitRequest, options: SubmitOptions = {}): Promise<SubmitOutcome> {
    return this.context.guard(() => submitSession(this.context, request, options));
  }

  cancel(sessionId: string, reason = 'cancelled by user'): Promise<void> {
    return this.context.guard(async () => {
      parseOrThrow(SessionId, sessionId, 'session id');
      // The reason goes into the job and the history: bounded as the HTTP API bounds it.
      parseOrThrow(z.object({ reason: CancelReason }), { reason }, 'cancel request');
      const { session } = await this.context.store.requireSession(sessionId);
      if (FINISHED_SESSION_STATES.includes(session.state)) {
        throw new OrqError('INVALID_STATE', `Session ${sessionId} is already ${session.state}`, {
          hint: 'Only sessions still planning, running or blocked can be cancelled.',
          details: { sessionId, state: session.state },
        });
      }
      // Recorded as a resume is: a wait right after the cancel goes on through the BLOCKED
      // state from before it until the coordinator applies it.
      await this.send(session, 'cancel_session', () =>
        outboxJob('coordinator', 'cancel', jobIds.cancel(sessionId, randomUUID()), {
          sessionId,
          reason,
        }),
      );
    });
  }

  resume(
    sessionId: string,
    request: ResumeRequest = {},
    options: { waitMs?: number; budgetWithinConfig?: boolean } = {},
  ): Promise<string> {
    return this.context.guard(async () => {
      parseOrThrow(SessionId, sessionId, 'session id');
      const parsed = parseOrThrow(ResumeRequest, request, 'resume request');
      if (options.budgetWithinConfig) checkBudgetWithinConfig(this.context.config, parsed.budget);
      const { session } = await this.context.store.requireSession(sessionId);
      await checkResumable(this.context, session, parsed);
      const requestId = randomUUID();
      const eventId = jobIds.resume(sessionId, requestId);
      const job = () =>
        outboxJob('coordinator', 'resume', eventId, {
          sessionId,
          mode: parsed.mode,
          requestId,
          ...(parsed.taskIds ? { taskIds: parsed.taskIds } : {}),
          ...(parsed.note ? { note: parsed.note } : {}),
          ...(parsed.budget ? { budget: parsed.budget } : {}),
        });
      // Without a running coordinator the request stays queued: that is not an error.
      await this.sendAndFollow(session, 'resume_session', job, options.waitMs, (entry) => {
        const inputs = entry.type === 'decision' ? entry.inputs : undefined;
        return inputs?.requestId === requestId || inputs?.eventId === eventId;
      });
      return requestId;
    });
  }

  answer(
    sessionId: string,
    answer: WaitAnswerInput,
    options: AnswerOptions = {},
  ): Promise<AnswerOutcome> {
    return this.context.guard(async () => {
      parseOrThrow(SessionId, sessionId, 'session id');
      const parsed = parseOrThrow(WaitAnswer, answer, 'answer');
      if (options.waitId !== undefined) parseOrThrow(WaitId, options.waitId, 'wait id');
      if (options.taskId !== undefined) parseOrThrow(TaskId, options.taskId, 'task id');
      const { session } = await this.context.store.requireSession(sessionId);
      const wait = await openWaitFor(this.context.store, session, parsed, options);
      const requestId = randomUUID();
      const eventId = jobIds.answer(sessionId, requestId);
      const job = () =>
        outboxJob('coordinator', 'answer', eventId, {
          sessionId,
          waitId: wait.id,
          requestId,
          answer: parsed,
          ...(options.by ? { by: options.by } : {}),
        });
      const applied = await this.sendAndFollow(
        session,
        'answer_wait',
        job,
        options.waitMs,
        async (entry) => {
          if (entry.type !== 'decision') return false;
          if (entry.inputs.requestId === requestId) return true;
          if (entry.decision === 'wait:answer-failed' && entry.inputs.eventId === eventId) {
            throw new OrqError('ANSWER_NOT_APPLIED', entry.reason, {
              hint: `Answer again: orq status ${sessionId} shows what waits; the session's history (orq history ${sessionId}) has the coordinator's error.`,
              details: { sessionId, waitId: wait.id, requestId },
            });
          }
          if (entry.decision === 'event:ignored' && entry.inputs.eventId === eventId) {
            throw await this.answerIgnored(sessionId, wait, entry.reason);
          }
          return false;
        },
      );
      return { requestId, waitId: wait.id, applied };
    });
  }

  answerQuestion(sessionId: string, text: string, options?: AnswerOptions): Promise<AnswerOutcome> {
    return this.answer(sessionId, { action: 'answer', text }, options);
  }

  approve(
    sessionId: string,
    { comment, ...rest }: AnswerOptions & { comment?: string } = {},
  ): Promise<AnswerOutcome> {
    return this.answer(sessionId, { action: 'approve', ...(comment ? { comment } : {}) }, rest);
  }

  reject(sessionId: string, feedback: string, options?: AnswerOptions): Promise<AnswerOutcome> {
    return this.answer(sessionId, { action: 'reject', feedback }, options);
  }

  editPlan(
    sessionId: string,
    plan: PlanBreakdownInput,
    {
      allowTermLoss,
      comment,
      ...rest
    }: AnswerOptions & { allowTermLoss?: boolean; comment?: string } = {},
  ): Promise<AnswerOutcome> {
    return this.answer(
      sessionId,
      {
        action: 'edit',
        plan: plan as PlanBreakdown,
        ...(allowTermLoss ? { allowTermLoss } : {}),
        ...(comment ? { comment } : {}),
      },
      rest,
    );
  }

  delete(sessionId: string): Promise<DeletedSession> {
    return this.context.guard(async () => {
      parseOrThrow(SessionId, sessionId, 'session id');
      const outcome = await deleteSession(this.context.store, sessionId);
      if (outcome.status === 'NOT_FOUND') throw sessionNotFound(sessionId);
      if (outcome.status === 'UNFINISHED') {
        throw new OrqError(
          'INVALID_STATE',
          `session ${sessionId} is ${outcome.state}: only a finished session can be deleted`,
          {
            hint: `Cancel it first (orq cancel ${sessionId}, or POST /sessions/${sessionId}/cancel); delete it once it is CANCELLED.`,
            details: { sessionId, state: outcome.state },
          },
        );
      }
      return { sessionId, state: outcome.state };
    });
  }

  prune(request: PruneRequest): Promise<PruneReport> {
    return this.context.guard(async () => {
      const parsed = parseOrThrow(PruneRequest, request, 'prune request');
      return pruneSessions(this.context.store, {
        cutoffMs: Date.now() - parsed.olderThanSeconds * 1000,
        ...(parsed.states ? { states: parsed.states } : {}),
        ...(parsed.dryRun ? { dryRun: true } : {}),
      });
    });
  }

  /**
   * Sends a request about the session (send), then follows the session's history from where it
   * was for up to `waitMs` (0: not at all) until `isReply` says the coordinator dealt with it,
   * so a `wait` right after sees the session it moved. Whether it did within the time.
   */
  private async sendAndFollow(
    session: Session,
    spanName: string,
    job: () => OutboxJob,
    waitFor: number | undefined,
    isReply: (entry: HistoryEntry) => boolean | Promise<boolean>,
  ): Promise<boolean> {
    const last = await this.context.store.lastHistoryId(session.id);
    await this.send(session, spanName, job);
    const waitMs = waitFor ?? APPLY_WAIT_MS;
    if (!(waitMs > 0)) return false;
    const signal = AbortSignal.timeout(waitMs);
    for await (const { entry } of this.watcher.watch(session.id, {
      ...(last ? { after: last } : {}),
      signal,
      blockMs: Math.min(waitMs, 500),
    })) {
      if (await isReply(entry)) return true;
    }
    return false;
  }

  /**
   * Enqueues a request about the session (the job `makeJob` builds, its id the event id) in a
   * span of the session's trace, under its submit: the job is built inside the span, so it
   * carries the span's context and the coordinator's work on it joins the trace. The request is
   * recorded as pending: a watch started from here on goes on through the state from before it
   * until the coordinator applies it. The add comes first, so a recorded request always has a
   * job (a watch drops a record whose job it cannot find). If the record cannot be written, the
   * job is taken back while no coordinator has taken it, so the caller's retry does not queue a
   * second one. BullMQ removes no job a worker holds; one taken already, or a Redis that does
   * not answer, leaves the job as it is. A retry then queues another request, which the
   * coordinator applies to the session as it then is: a budget resume of a session no longer
   * BUDGET_EXHAUSTED, or a retry with no task blocked any more, is ignored.
   */
  private send(session: Session, spanName: string, makeJob: () => OutboxJob): Promise<void> {
    const { queues, store } = this.context;
    const trace = {
      kind: SpanKind.PRODUCER,
      traceparent: session.traceparent,
      sessionId: session.id,
      attributes: { 'orq.session.id': session.id },
    };
    return inSpan(spanName, trace, async () => {
      const job = makeJob();
      await queues.add(job);
      try {
        await markRequestPending(store, session.id, job.jobId);
      } catch (error) {
        const coordinator = queues.get(ROLE_QUEUE.coordinator);
        try {
          if (UNTAKEN_JOB_STATES.includes(await coordinator.getJobState(job.jobId))) {
            await coordinator.remove(job.jobId);
          }
        } catch {
          // The call fails with the mark's error; this one says nothing more.
        }
        throw error;
      }
    });
  }

  /**
   * The error of an answer the coordinator ignored: the wait ended before it was applied, or
   * the session's budget stopped it meanwhile and the question is still open.
   */
  private async answerIgnored(
    sessionId: string,
    wait: HumanWait,
    reason: string,
  ): Promise<OrqError> {
    const now = (await this.context.store.requireSession(sessionId)).session;
    // Stopped by its budget after the answer was sent: the question is still open.
    const stillAsked = now.questions?.find((q) => q.id === wait.id);
    if (now.state === 'BUDGET_EXHAUSTED' && stillAsked)
      return budgetStoppedQuestion(now, stillAsked);
    return new WaitEndedError(
      sessionId,
      wait.id,
      reason.replace(/^answer: /, ''),
      now.wait?.id ??
        now.questions?.find((q) => wait.kind === 'question' && q.taskId === wait.taskId)?.id,
    );
  }
}
