import type { WaitTimedOutEvent } from '../../shared/queues.js';
import type { CoordinatorContext, Transition } from './context.js';
import { onPlanWaitTimedOut } from './plan-approval.js';
import { isExecutionWaitId, onExecutionWaitTimedOut } from './step-waits.js';

/**
 * A wait's timer fired (wait-timer.ts), routed by the wait's kind as answers are (answers.ts): a
 * running execution's step approval or agent question (step-waits.ts), else a plan approval
 * (plan-approval.ts). Each does nothing when its wait ended first.
 */
export async function onWaitTimedOut(
  ctx: CoordinatorContext,
  event: WaitTimedOutEvent,
  eventId: string,
): Promise<Transition> {
  if (isExecutionWaitId(event.waitId)) return onExecutionWaitTimedOut(ctx, event, eventId);
  return onPlanWaitTimedOut(ctx, event, eventId);
}
