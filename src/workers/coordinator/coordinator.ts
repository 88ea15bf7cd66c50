import type { Job } from 'bullmq';
import type { ZodType } from 'zod';
import { JobSchemas, type CoordinatorEventName } from '../../shared/queues.js';
import { flushOutbox, type QueueSet } from '../../shared/queue-set.js';
import type { ApplyResult } from '../../shared/store/session-store.js';
import type { CoordinatorContext, Transition } from './context.js';
import { onPlanJudged } from './plan-judged.js';
import { finalizeSession, onCancel, onJobFailed, onResume } from './session-events.js';
import { onTaskJudged } from './task-judged.js';
import { onTaskReplanned } from './task-replanned.js';
import { parseOrThrow } from '../../shared/errors.js';

/** Retries of a transition whose snapshot was changed by a concurrent coordinator. */
const MAX_CONFLICT_RETRIES = 50;

type Handler = (ctx: CoordinatorContext, event: never, eventId: string) => Promise<Transition>;

const handlers: Record<CoordinatorEventName, Handler> = {
  'plan-judged': onPlanJudged as Handler,
  'task-judged': onTaskJudged as Handler,
  'task-replanned': onTaskReplanned as Handler,
  cancel: onCancel as Handler,
  resume: onResume as Handler,
  'job-failed': onJobFailed as Handler,
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
  const schema = schemas[name];
  const handler = handlers[name as CoordinatorEventName];
  if (!schema || !handler) throw new Error(`unknown coordinator event ${name}`);
  const event = parseOrThrow(schema, data, `coordinator event ${name}`) as { sessionId: string };
  const log = ctx.logger.child({ sessionId: event.sessionId, event: name, eventId });

  for (let tries = 0; tries < MAX_CONFLICT_RETRIES; tries += 1) {
    const transition = await handler(ctx, event as never, eventId);
    let result: ApplyResult;
    if ('ignore' in transition) {
      log.debug({ reason: transition.ignore }, 'event changes nothing');
      result = await ctx.store.apply(event.sessionId, {
        eventId,
        history: [
          {
            type: 'decision',
            decision: 'event:ignored',
            reason: `${name}: ${transition.ignore}`,
            inputs: {},
          },
        ],
      });
      await flushOutbox(ctx.store, ctx.queues, event.sessionId);
      return { status: 'IGNORED', reason: transition.ignore };
    }
    result = await ctx.store.apply(event.sessionId, transition.changeset);
    if (result.status === 'CONFLICT') {
      await new Promise((r) => setTimeout(r, Math.random() * 5 * (tries + 1)));
      continue;
    }
    if (result.status === 'STATE') {
      log.debug('session state changed under the event; nothing to do');
      return { status: 'STATE' };
    }
    // OK, or DUPLICATE (a redelivery after a crash): either way drain the outbox and finalize.
    await flushOutbox(ctx.store, ctx.queues, event.sessionId);
    await finalize(ctx, event.sessionId, result);
    log.debug({ status: result.status, counters: result.counters }, 'event applied');
    return { status: result.status };
  }
  throw new Error(`event ${eventId} kept conflicting after ${MAX_CONFLICT_RETRIES} tries`);
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
    if (applied.status !== 'CONFLICT') return;
    counters = applied.counters;
  }
}

export function createCoordinatorProcessor(ctx: CoordinatorContext & { queues: QueueSet }) {
  return async (job: Job): Promise<CoordinatorOutcome> => {
    if (!job.id) throw new Error('coordinator job without id');
    return applyEvent(ctx, job.name, job.data, job.id);
  };
}
