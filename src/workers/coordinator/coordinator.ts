import type { Job } from 'bullmq';
import type { ZodType } from 'zod';
import { JobSchemas, type CoordinatorEventName, type UnsettledUsage } from '../../shared/queues.js';
import { flushOutbox, type QueueSet } from '../../shared/queue-set.js';
import type { ApplyResult } from '../../shared/store/session-records.js';
import type { CoordinatorContext, Transition } from './context.js';
import { onPlanJudged } from './plan-judged.js';
import { finalizeSession, onCancel, onJobFailed, onResume } from './session-events.js';
import { onTaskChecked } from './task-checked.js';
import { onTaskJudged } from './task-judged.js';
import { onTaskReplanned } from './task-replanned.js';
import { onIntegrated } from './integration.js';
import { onPublished, onResultJudged } from './final-judgement.js';
import { onAnswer } from './answers.js';
import { onWaitTimedOut } from './wait-timeouts.js';
import { onStepWaiting } from './step-waits.js';
import { ValidationError } from '../../shared/errors.js';
import { SessionId } from '../../shared/domain/session.js';
import { faultAfterStateWrite } from './fault-injection.js';

/** Retries of a transition whose snapshot was changed by a concurrent coordinator. */
const MAX_CONFLICT_RETRIES = 50;

type Handler = (ctx: CoordinatorContext, event: never, eventId: string) => Promise<Transition>;

const handlers: Record<CoordinatorEventName, Handler> = {
  'plan-judged': onPlanJudged as Handler,
  'task-judged': onTaskJudged as Handler,
  'task-checked': onTaskChecked as Handler,
  'task-replanned': onTaskReplanned as Handler,
  cancel: onCancel as Handler,
  resume: onResume as Handler,
  'job-failed': onJobFailed as Handler,
  integrated: onIntegrated as Handler,
  'result-judged': onResultJudged as Handler,
  published: onPublished as Handler,
  answer: onAnswer as Handler,
  'wait-timed-out': onWaitTimedOut as Handler,
  'step-waiting': onStepWaiting as Handler,
};

export interface CoordinatorOutcome {
  status: ApplyResult['status'] | 'IGNORED';
  reason?: string;
}

/**
 * Applies one event: compute the transition from a snapshot, apply it atomically (retrying
 * on a concurrent change), drain the outbox, then complete or block the session if due.
 */
export async function applyEvent(
  ctx: CoordinatorContext & { queues: QueueSet },
  name: string,
  data: unknown,
  eventId: string,
): Promise<CoordinatorOutcome> {
  const schemas = JobSchemas.coordinator as Record<string, ZodType>;
  const schema = Object.hasOwn(schemas, name) ? schemas[name] : undefined;
  const handler = handlers[name as CoordinatorEventName];
  const parsed = schema?.safeParse(data);
  if (!schema || !handler || !parsed?.success) {
    // A ValidationError is permanent: the job fails once, and the session's history says why.
    const error = parsed?.error
      ? ValidationError.fromZod(`coordinator event ${name}`, parsed.error)
      : new ValidationError('coordinator event', [
          { path: '(name)', message: `unknown event "${name}"` },
        ]);
    // Best effort: a failure to record must not turn the refusal into a retried error.
    await recordRejectedEvent(ctx, name, data, eventId, error).catch((cause: unknown) =>
      ctx.logger.warn({ eventId, err: (cause as Error).message }, 'cannot record a bad event'),
    );
    throw error;
  }
  const event = parsed.data as { sessionId: string; unsettledUsage?: UnsettledUsage[] };
  // Usage that came with the event is counted by whichever write records it, applied or ignored.
  const usage = event.unsettledUsage?.length ? { unsettledUsage: event.unsettledUsage } : {};
  const log = ctx.logger.child({ sessionId: event.sessionId, event: name, eventId });

  /**
   * Records that the event changes nothing, and why (counting its usage), once; a quiet one
   * only marks the event applied, writing no history.
   */
  const ignored = async (reason: string, quiet = false): Promise<CoordinatorOutcome> => {
    const result = await ctx.store.apply(event.sessionId, {
      eventId,
      history: quiet
        ? []
        : [
            {
              type: 'decision',
              decision: 'event:ignored',
              reason: `${name}: ${reason}`,
              inputs: { eventId },
            },
          ],
      ...usage,
    });
    if (result.status === 'GONE') return gone(log);
    if (result.status === 'OK') faultAfterStateWrite();
    // DUPLICATE: this event was applied before a crash; its jobs may still sit in the outbox.
    if (result.status === 'DUPLICATE') await flushOutbox(ctx.store, ctx.queues, event.sessionId);
    // A redelivery after a crash between the apply and finalize finds the event stale, yet the
    // session may still be due to complete or block: settle it here too, or it stays RUNNING.
    await finalize(ctx, event.sessionId, result);
    return { status: 'IGNORED', reason };
  };

  for (let tries = 0; tries < MAX_CONFLICT_RETRIES; tries += 1) {
    const transition = await handler(ctx, event as never, eventId);
    if ('ignore' in transition) {
      log.debug({ reason: transition.ignore }, 'event changes nothing');
      return ignored(transition.ignore, transition.quiet === true);
    }
    const result = await ctx.store.apply(event.sessionId, { ...transition.changeset, ...usage });
    if (result.status === 'GONE') return gone(log);
    const { fence } = transition.changeset;
    if (result.status === 'FENCED' && fence) {
      // A delivery that lost its job (paused past its lock) handed on after a later delivery
      // of the job started: that one's result is the one to apply (issue 35).
      const reason = `the result of ${fence.taskId} attempt ${fence.attempt} comes from a superseded delivery (fence ${fence.value}); a later delivery of its job hands on its own`;
      log.info({ taskId: fence.taskId, attempt: fence.attempt, fence: fence.value }, reason);
      ctx.metrics?.countDecision('task:fenced');
      return ignored(reason);
    }
    if (result.status === 'OK') {
      faultAfterStateWrite();
      // Best effort: what it cleans up (a stored result) only costs memory if left.
      await transition
        .applied?.()
        .catch((error: unknown) =>
          log.warn({ err: (error as Error).message }, 'clean-up after the write failed'),
        );
      for (const entry of transition.changeset.history ?? []) {
        if (entry.type === 'decision') ctx.metrics?.countDecision(entry.decision);
      }
    }
    if (result.status === 'CONFLICT') {
      await new Promise((r) => setTimeout(r, Math.random() * 5 * (tries + 1)));
      continue;
    }
    if (result.status === 'STATE') {
      // The session left the state this transition required (cancelled, completed by a
      // concurrent finalize) between our read and the write: decide again from the new state,
      // which records the event as ignored, with its reason, in the history.
      log.debug('session state changed under the event; deciding again');
      continue;
    }
    // OK: enqueue what this transition wrote. DUPLICATE (a redelivery after a crash): drain
    // whatever the first delivery left in the outbox. Either way, then finalize.
    await flushOutbox(
      ctx.store,
      ctx.queues,
      event.sessionId,
      result.status === 'OK' ? (transition.changeset.outbox ?? []) : undefined,
    );
    await finalize(ctx, event.sessionId, result);
    log.debug({ status: result.status, counters: result.counters }, 'event applied');
    return { status: result.status };
  }
  throw new Error(`event ${eventId} kept conflicting after ${MAX_CONFLICT_RETRIES} tries`);
}

/** The session was deleted: its late events are dropped, and nothing of it is written again. */
function gone(log: CoordinatorContext['logger']): CoordinatorOutcome {
  log.info('the session was deleted; its event is dropped');
  return { status: 'GONE', reason: 'session deleted' };
}

async function finalize(
  ctx: CoordinatorContext & { queues: QueueSet },
  sessionId: string,
  result: ApplyResult,
): Promise<void> {
  let counters = result.counters;
  if (result.status === 'DUPLICATE') {
    const snapshot = await ctx.store.loadSession(sessionId);
    if (!snapshot) return;
    counters = snapshot.counters;
  }
  for (let tries = 0; tries < MAX_CONFLICT_RETRIES; tries += 1) {
    const transition = await finalizeSession(ctx, sessionId, counters);
    if (!transition || 'ignore' in transition) return;
    const applied = await ctx.store.apply(sessionId, transition.changeset);
    // Only the start of an integration queues a job here (its integrate job).
    if (applied.status === 'OK' && transition.changeset.outbox?.length) {
      await flushOutbox(ctx.store, ctx.queues, sessionId, transition.changeset.outbox);
    }
    if (applied.status !== 'CONFLICT') return;
    counters = applied.counters;
  }
}

/**
 * A malformed event cannot be applied. When it names an existing session, an `error` entry in
 * that session's history records why, once per event (its own event id, so a later valid event
 * under the same job id is not taken for a duplicate). Unknown sessions get nothing written.
 */
async function recordRejectedEvent(
  ctx: CoordinatorContext,
  name: string,
  data: unknown,
  eventId: string,
  error: ValidationError,
): Promise<void> {
  const sessionId = SessionId.safeParse((data as { sessionId?: unknown } | null)?.sessionId);
  if (!sessionId.success || !(await ctx.store.loadSession(sessionId.data))) return;
  await ctx.store.apply(sessionId.data, {
    eventId: `rejected|${eventId}`,
    history: [
      {
        type: 'error',
        role: 'coordinator',
        code: error.code,
        message: `rejected ${name} event ${eventId}: ${error.message}`,
      },
    ],
  });
}

export function createCoordinatorProcessor(ctx: CoordinatorContext & { queues: QueueSet }) {
  return async (job: Job): Promise<CoordinatorOutcome> => {
    if (!job.id) throw new Error('coordinator job without id');
    return applyEvent(ctx, job.name, job.data, job.id);
  };
}
