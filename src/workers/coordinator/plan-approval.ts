import type { PlanBreakdown } from '../../shared/domain/plan.js';
import type { HistoryEntryDraft } from '../../shared/domain/history.js';
import type { PlanAnswer, PlanApprovalWait } from '../../shared/domain/human-wait.js';
import { openWaits, type Session } from '../../shared/domain/session.js';
import type { AnswerEvent, OutboxJob, WaitTimedOutEvent } from '../../shared/queues.js';
import { checkPlanEdit } from '../../shared/rules/plan-edit.js';
import type { CoordinatorContext, Transition } from './context.js';
import { ignore, ignoreQuietly, planJob } from './context.js';
import { startRunning } from './start-running.js';
import { notifyJob } from './wait-notice.js';
import { waitTimerJob } from './wait-timer.js';

/** What the judge said of the plan that waits: shown to the person who decides. */
export interface JudgedPlan {
  score?: number | undefined;
  issues: readonly string[];
  suggestions: readonly string[];
}

/** The wait id of a planning attempt's approval: one per attempt, so an old answer is stale. */
export const planWaitId = (attempt: number): string => `plan-${attempt}`;

/**
 * approval.plan required: the accepted plan is not run but waits, with its score and the judge's
 * feedback, in AWAITING_APPROVAL. Nothing is queued but the notification and, with
 * approval.timeoutSeconds, the delayed timeout event: the wait holds no worker, lock or quota.
 */
export function openPlanApproval(
  session: Session,
  version: number,
  plan: PlanBreakdown,
  eventId: string,
  history: HistoryEntryDraft[],
  reason: string,
  judged: JudgedPlan,
): Transition {
  const { approval } = session.config;
  const now = Date.now();
  const timeoutAt =
    approval.timeoutSeconds !== undefined ? now + approval.timeoutSeconds * 1000 : undefined;
  const wait: PlanApprovalWait = {
    id: planWaitId(session.planning.attempt),
    kind: 'plan-approval',
    openedAt: new Date(now).toISOString(),
    ...(timeoutAt !== undefined
      ? { timeoutAt: new Date(timeoutAt).toISOString(), onTimeout: approval.onTimeout }
      : {}),
    attempt: session.planning.attempt,
    plan,
    ...(judged.score !== undefined ? { score: judged.score } : {}),
    issues: [...judged.issues],
    suggestions: [...judged.suggestions],
    reason,
  };
  const next: Session = {
    ...session,
    state: 'AWAITING_APPROVAL',
    updatedAt: new Date(now).toISOString(),
    wait,
  };
  const outbox = [notifyJob(session, wait, 'wait.opened', 'AWAITING_APPROVAL')];
  if (timeoutAt !== undefined) outbox.push(waitTimerJob(session.id, wait.id, timeoutAt));
  return {
    changeset: {
      eventId,
      session: { record: next, expectedVersion: version },
      outbox,
      history: [
        ...history,
        {
          type: 'state_change',
          entity: 'session',
          from: session.state,
          to: 'AWAITING_APPROVAL',
          reason: `${reason}; waiting for a person to approve the plan`,
        },
        { type: 'wait', action: 'opened', waitId: wait.id, kind: wait.kind, wait },
      ],
    },
  };
}

/** The session's open plan approval, if `waitId` names it; else why the event is stale. */
function openWait(session: Session, waitId: string): PlanApprovalWait | string {
  if (session.state !== 'AWAITING_APPROVAL' || !session.wait) {
    return `the wait ${waitId} is no longer open: session ${session.id} is ${session.state}`;
  }
  if (session.wait.id !== waitId) {
    return `the wait ${waitId} is no longer open: session ${session.id} now waits on ${session.wait.id}`;
  }
  return session.wait;
}

/** The session without its wait: what every answer starts from. */
function withoutWait(session: Session): Session {
  const { wait: _closed, ...rest } = session;
  return { ...rest, updatedAt: new Date().toISOString() };
}

/** A person answered the plan approval: run the plan, run their edit of it, or replan. */
export async function onPlanAnswer(
  ctx: CoordinatorContext,
  event: AnswerEvent,
  eventId: string,
): Promise<Transition> {
  const { session, version } = await ctx.store.requireSession(event.sessionId);
  const wait = openWait(session, event.waitId);
  if (typeof wait === 'string') return ignore(eventId, wait);
  if (event.answer.action === 'answer') {
    return ignore(eventId, `the wait ${wait.id} is a plan approval: approve, reject or edit it`);
  }
  return answerPlan(session, version, wait, event.answer, eventId, {
    by: event.by,
    requestId: event.requestId,
    action: 'answered',
  });
}

/** approval.timeoutSeconds passed with the wait still open: approve or reject as configured. */
export async function onPlanWaitTimedOut(
  ctx: CoordinatorContext,
  event: WaitTimedOutEvent,
  eventId: string,
): Promise<Transition> {
  const { session, version } = await ctx.store.requireSession(event.sessionId);
  const wait = openWait(session, event.waitId);
  // The wait ended before its timer (answered, cancelled): its end is in the history already.
  if (typeof wait === 'string') return ignoreQuietly(eventId, wait);
  if (wait.onTimeout === 'approve') {
    return answerPlan(session, version, wait, { action: 'approve' }, eventId, {
      action: 'timed-out',
    });
  }
  const reason = `nobody approved the plan within ${session.config.approval.timeoutSeconds} s (approval.onTimeout: reject)`;
  return closeAndFail(session, version, wait, eventId, 'APPROVAL_TIMED_OUT', reason, {
    action: 'timed-out',
  });
}

interface Closing {
  action: 'answered' | 'timed-out';
  by?: string | undefined;
  requestId?: string;
}

function waitClosedEntry(
  wait: PlanApprovalWait,
  closing: Closing,
  answer?: PlanAnswer,
): HistoryEntryDraft {
  return {
    type: 'wait',
    action: closing.action,
    waitId: wait.id,
    kind: wait.kind,
    ...(answer ? { answer } : {}),
    ...(closing.by ? { by: closing.by } : {}),
  };
}

function answerPlan(
  session: Session,
  version: number,
  wait: PlanApprovalWait,
  answer: PlanAnswer,
  eventId: string,
  closing: Closing,
): Transition {
  const by = closing.by ? ` by ${closing.by}` : '';
  const inputs = {
    waitId: wait.id,
    ...(closing.requestId ? { requestId: closing.requestId } : {}),
    ...(closing.by ? { by: closing.by } : {}),
  };
  const open = withoutWait(session);
  const closed = waitClosedEntry(wait, closing, answer);
  const notify = (state: Session['state']) =>
    notifyJob(session, wait, 'wait.closed', state, `${closing.action}:${answer.action}`);

  if (answer.action === 'approve') {
    const reason =
      closing.action === 'timed-out'
        ? `plan approved on its timeout (approval.onTimeout: approve)`
        : `plan approved${by}`;
    return withOutbox(
      startRunning(
        open,
        version,
        wait.plan,
        eventId,
        [
          closed,
          {
            type: 'decision',
            decision: 'approval:approve',
            reason,
            inputs: { ...inputs, ...(answer.comment ? { comment: answer.comment } : {}) },
          },
        ],
        reason,
      ),
      notify('RUNNING'),
    );
  }

  if (answer.action === 'edit') {
    const check = checkPlanEdit({
      waiting: wait.plan,
      edited: answer.plan,
      config: session.config.refinement,
      requiredTerms: session.requiredTerms,
      maxTasks: session.config.budget.maxTasks,
      allowTermLoss: answer.allowTermLoss === true,
    });
    // The producer checked it first: only a changed config could refuse it here.
    if (!check.accepted)
      return ignore(eventId, `the edited plan is refused: ${check.problems.join(' ')}`);
    const reason = `plan edited${by}: ${answer.plan.tasks.length} task(s)`;
    return withOutbox(
      startRunning(
        open,
        version,
        answer.plan,
        eventId,
        [
          closed,
          { type: 'plan', source: 'person', attempt: wait.attempt, plan: answer.plan },
          {
            type: 'decision',
            decision: 'approval:edit',
            reason,
            inputs: {
              ...inputs,
              taskCount: answer.plan.tasks.length,
              previousTaskCount: wait.plan.tasks.length,
              taskCountChange: check.structure.taskCountChange,
              termPreservation: check.termPreservation,
              droppedTerms: check.droppedTerms,
              allowTermLoss: answer.allowTermLoss === true,
              ...(answer.comment ? { comment: answer.comment } : {}),
            },
          },
          ...(check.droppedTerms.length > 0
            ? [
                {
                  type: 'decision' as const,
                  decision: 'terms:warning',
                  reason: `the edited plan drops required terms, as the person allowed: ${check.droppedTerms.join(', ')}`,
                  inputs: { termPreservation: check.termPreservation },
                },
              ]
            : []),
        ],
        reason,
      ),
      notify('RUNNING'),
    );
  }

  // A rejection is a replan with the person's feedback, counted as a refinement attempt: with
  // none left, the session fails rather than loop between the Planner and the person for ever.
  const { planning } = session;
  const max = session.config.refinement.maxRefinementAttempts;
  const feedback = answer.feedback.trim();
  if (planning.attemptCount >= max) {
    const reason = `the plan was rejected${by} and no refinement attempt is left (${planning.attemptCount} of ${max}): ${feedback}`;
    return closeAndFail(session, version, wait, eventId, 'PLAN_REJECTED', reason, closing, answer);
  }
  const attempt = planning.attempt + 1;
  const planFeedback = { issues: [`A person rejected the plan: ${feedback}`], suggestions: [] };
  const next: Session = {
    ...open,
    state: 'PLANNING',
    planning: {
      ...planning,
      attempt,
      attemptCount: planning.attemptCount + 1,
      previousPlan: wait.plan,
      ...(wait.score !== undefined ? { previousScore: wait.score } : {}),
      // The person found it wanting: no later verdict falls back on it.
      previousAcceptable: false,
    },
  };
  const reason = `plan rejected${by}: replanning (attempt ${planning.attemptCount + 1} of ${max})`;
  return {
    changeset: {
      eventId,
      session: { record: next, expectedVersion: version },
      outbox: [planJob(session, attempt, planFeedback), notify('PLANNING')],
      history: [
        closed,
        {
          type: 'decision',
          decision: 'approval:reject',
          reason,
          inputs: { ...inputs, feedback, attemptCount: planning.attemptCount + 1 },
        },
        {
          type: 'state_change',
          entity: 'session',
          from: 'AWAITING_APPROVAL',
          to: 'PLANNING',
          reason,
        },
      ],
    },
  };
}

function closeAndFail(
  session: Session,
  version: number,
  wait: PlanApprovalWait,
  eventId: string,
  code: string,
  reason: string,
  closing: Closing,
  answer?: PlanAnswer,
): Transition {
  return {
    changeset: {
      eventId,
      session: {
        record: { ...withoutWait(session), state: 'FAILED', failure: { code, reason } },
        expectedVersion: version,
      },
      outbox: [
        notifyJob(
          session,
          wait,
          'wait.closed',
          'FAILED',
          `${closing.action}:${answer?.action ?? 'reject'}`,
        ),
      ],
      history: [
        waitClosedEntry(wait, closing, answer),
        {
          type: 'decision',
          decision: `approval:${code.toLowerCase()}`,
          reason,
          inputs: { waitId: wait.id },
        },
        { type: 'state_change', entity: 'session', from: session.state, to: 'FAILED', reason },
      ],
    },
  };
}

/** A transition with one more job in its outbox. */
function withOutbox(transition: Transition, job: OutboxJob): Transition {
  if ('ignore' in transition) return transition;
  const { changeset } = transition;
  return { ...transition, changeset: { ...changeset, outbox: [...(changeset.outbox ?? []), job] } };
}

/**
 * A cancel of a session that waits for a person ends the wait (and its open questions) too: the record goes, the
 * history says so, and the webhook hears it.
 */
export function cancelWait(
  session: Session,
  reason: string,
): { history: HistoryEntryDraft[]; outbox: OutboxJob[] } {
  const waits = openWaits(session);
  return {
    history: waits.map((wait) => ({
      type: 'wait' as const,
      action: 'cancelled' as const,
      waitId: wait.id,
      kind: wait.kind,
      by: reason,
    })),
    outbox: waits.map((wait) => notifyJob(session, wait, 'wait.closed', 'CANCELLED', 'cancelled')),
  };
}
