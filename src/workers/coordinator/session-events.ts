import { FINISHED_SESSION_STATES, type Session } from '../../shared/domain/session.js';
import {
  type CancelEvent,
  type JobFailedEvent,
  type OutboxJob,
  type ResumeEvent,
} from '../../shared/queues.js';
import type { HistoryEntryDraft } from '../../shared/domain/history.js';
import type { Counters } from '../../shared/store/session-records.js';
import type { CoordinatorContext, Transition } from './context.js';
import { ignore, planJob, recordOnly } from './context.js';
import { fillSlots, isActive, isOpen, TaskEdits } from './task-edits.js';
import {
  integrationFailed,
  isIntegrationJob,
  resumeIntegration,
  startIntegration,
} from './integration.js';
import { integrationResumable } from '../../shared/rules/integration-plan.js';
import { cancelWait } from './plan-approval.js';
import { closeQuestions, type QuestionClosing } from './questions.js';
import { waitEventFailed } from './wait-failures.js';
import { endExecutionWaits } from './step-waits.js';

const stamp = (session: Session): Session => ({ ...session, updatedAt: new Date().toISOString() });

/** Cancel: the session and every unfinished task become CANCELLED; late results are ignored. */
export async function onCancel(
  ctx: CoordinatorContext,
  event: CancelEvent,
  eventId: string,
): Promise<Transition> {
  const { session, version } = await ctx.store.requireSession(event.sessionId);
  if (FINISHED_SESSION_STATES.includes(session.state))
    return ignore(eventId, `session is already ${session.state}`);
  const tasks = await ctx.store.loadTasks(session.id, session.taskIds);
  const edits = new TaskEdits(session, tasks.values());
  for (const { task } of tasks.values()) {
    if (isOpen(task.state))
      edits.put({ ...task, state: 'CANCELLED', replanPending: false }, event.reason);
  }
  // A session waiting for a person stops waiting (issue 48).
  const { wait: _ended, questions: _asked, stepWaits: _steps, ...rest } = stamp(session);
  const waitEnd = cancelWait(session, event.reason);
  return {
    changeset: {
      eventId,
      session: { record: { ...rest, state: 'CANCELLED' }, expectedVersion: version },
      tasks: edits.changes(),
      counters: edits.counterDelta(),
      ...(waitEnd.outbox.length > 0 ? { outbox: waitEnd.outbox } : {}),
      history: [
        ...waitEnd.history,
        {
          type: 'state_change',
          entity: 'session',
          from: session.state,
          to: 'CANCELLED',
          reason: event.reason,
        },
        ...edits.history,
      ],
    },
  };
}

/** Resume blocked tasks: run them again (retry / continue with a note) or skip them. */
export async function onResume(
  ctx: CoordinatorContext,
  event: ResumeEvent,
  eventId: string,
): Promise<Transition> {
  const { session, version } = await ctx.store.requireSession(event.sessionId);
  if (session.state === 'BUDGET_EXHAUSTED') {
    return resumeWithBudget(ctx, session, version, event, eventId);
  }
  if (integrationResumable(session)) return resumeIntegration(session, version, event, eventId);
  if (session.state !== 'BLOCKED' && session.state !== 'RUNNING') {
    return ignore(eventId, `session is ${session.state}; only BLOCKED or RUNNING sessions resume`);
  }
  if (event.budget)
    return ignore(eventId, 'a budget is only given to resume a BUDGET_EXHAUSTED session');
  // A resume's note answers the questions of the tasks it continues; retry and skip end them.
  const closing: QuestionClosing =
    event.mode === 'continue' && event.note
      ? { answer: { action: 'answer', text: event.note }, by: 'resume' }
      : { by: `resume (${event.mode})` };
  return resumeBlocked(ctx, session, version, event, eventId, {
    decision: `resume:${event.mode}`,
    closing,
  });
}

/**
 * Runs blocked tasks of a BLOCKED or RUNNING session again (retry / continue with a note) or
 * skips them: a resume's, or an answered question's (questions.ts), which names its decision
 * and how the tasks' open questions end.
 */
export async function resumeBlocked(
  ctx: CoordinatorContext,
  session: Session,
  version: number,
  event: Omit<ResumeEvent, 'budget'>,
  eventId: string,
  how: { decision: string; closing: QuestionClosing; inputs?: Record<string, unknown> },
): Promise<Transition> {
  const all = await ctx.store.loadTasks(session.id, session.taskIds);
  const wanted = event.taskIds ? new Set(event.taskIds) : undefined;
  const targets = [...all.values()].filter(
    (s) => s.task.state === 'BLOCKED' && (!wanted || wanted.has(s.task.id)),
  );
  if (targets.length === 0) return ignore(eventId, 'no blocked task to resume');

  const edits = new TaskEdits(session, all.values());
  const reason = `resume (${event.mode})${event.note ? `: ${event.note}` : ''}`;
  for (const { task } of targets) {
    if (event.mode === 'skip') {
      edits.put({ ...task, state: 'SKIPPED' }, reason);
      edits.releaseDependents(task.id);
    } else {
      edits.put(
        {
          ...task,
          state: 'READY',
          continuations: 0,
          feedback: event.mode === 'continue' ? event.note : undefined,
        },
        reason,
      );
      if (task.pendingDependencies === 0) edits.dispatch(task.id, reason);
    }
  }
  // Before the history is gathered: the dispatches write their state changes into it.
  const slots = await fillSlots(ctx.store, edits, session);
  const questions = closeQuestions(
    session,
    new Set(targets.map((t) => t.task.id)),
    how.closing,
    'RUNNING',
  );
  const history: HistoryEntryDraft[] = [
    ...questions.history,
    {
      type: 'decision' as const,
      decision: how.decision,
      reason,
      inputs: {
        taskIds: targets.map((t) => t.task.id),
        note: event.note,
        requestId: event.requestId,
        ...how.inputs,
      },
    },
    ...edits.history,
  ];
  const next: Session = { ...stamp(questions.record), state: 'RUNNING' };
  if (session.state === 'BLOCKED') {
    history.push({
      type: 'state_change',
      entity: 'session',
      from: 'BLOCKED',
      to: 'RUNNING',
      reason,
    });
  }
  return {
    changeset: {
      eventId,
      ...slots,
      session: { record: next, expectedVersion: version },
      tasks: edits.changes(),
      readTasks: edits.reads(),
      counters: edits.counterDelta(),
      outbox: [...edits.outbox, ...questions.outbox],
      history,
    },
  };
}

/**
 * A role job failed its last try. Planning failures fail the session (there is no plan to
 * run); a task's failure blocks that task so a person can resume it.
 */
export async function onJobFailed(
  ctx: CoordinatorContext,
  event: JobFailedEvent,
  eventId: string,
): Promise<Transition> {
  const { session, version } = await ctx.store.requireSession(event.sessionId);
  const errorEntry = {
    type: 'error' as const,
    role: event.role,
    message: event.malformed ? `malformed job ${event.jobId}: ${event.error}` : event.error,
    ...(event.attempt !== undefined ? { attempt: event.attempt } : {}),
    ...(event.code ? { code: event.code } : {}),
    ...(event.taskId ? { taskId: event.taskId } : {}),
  };
  // A job that does not match its schema is bad input, not a step of this session: it is
  // recorded and changes nothing (the session's own jobs are always well-formed).
  if (event.malformed) return recordOnly(eventId, errorEntry, 'malformed job rejected');
  if (event.code === 'BUDGET_EXHAUSTED')
    return stopOnBudget(ctx, session, version, event, eventId, errorEntry);
  if (isIntegrationJob(event.jobId)) {
    return integrationFailed(session, version, event, eventId, errorEntry);
  }
  if (event.waitId !== undefined) {
    return waitEventFailed(session, { ...event, waitId: event.waitId }, eventId, errorEntry);
  }
  if (!event.taskId) {
    if (session.state !== 'PLANNING' || session.planning.attempt !== event.attempt) {
      return recordOnly(
        eventId,
        errorEntry,
        `stale ${event.role} failure for attempt ${event.attempt}`,
      );
    }
    const reason = `${event.role} failed on plan attempt ${event.attempt}: ${event.error}`;
    return {
      changeset: {
        eventId,
        session: {
          record: { ...stamp(session), state: 'FAILED', failure: { code: 'ROLE_FAILED', reason } },
          expectedVersion: version,
        },
        history: [
          errorEntry,
          { type: 'state_change', entity: 'session', from: session.state, to: 'FAILED', reason },
        ],
      },
    };
  }
  if (session.state !== 'RUNNING')
    return recordOnly(eventId, errorEntry, `session is ${session.state}`);
  const snapshot = await ctx.store.loadTask(session.id, event.taskId);
  if (!snapshot || !isActive(snapshot.task.state) || snapshot.task.attempts !== event.attempt) {
    return recordOnly(
      eventId,
      errorEntry,
      `stale ${event.role} failure for ${event.taskId} attempt ${event.attempt}`,
    );
  }
  const edits = new TaskEdits(session, [snapshot]);
  const reason = `${event.role} failed: ${event.error}`;
  edits.put({ ...snapshot.task, state: 'BLOCKED', replanPending: false }, reason);
  const slots = await fillSlots(ctx.store, edits, session);
  return {
    changeset: {
      eventId,
      ...slots,
      requireStates: ['RUNNING'],
      tasks: edits.changes(),
      counters: edits.counterDelta(),
      history: [errorEntry, ...edits.history],
    },
  };
}

/**
 * A session stopped by its budget goes on with the higher limits given. Stopped after planning,
 * its open tasks were cancelled by the stop, and those (the only CANCELLED tasks such a session
 * has) are ready again, the ones with nothing left to wait for dispatched at once. Stopped while
 * planning, it plans again (planAgain). The usage hash forgets the refusal in the same
 * write, and every pod reads the raised budget on its next job.
 */
async function resumeWithBudget(
  ctx: CoordinatorContext,
  session: Session,
  version: number,
  event: ResumeEvent,
  eventId: string,
): Promise<Transition> {
  if (!event.budget) {
    return ignore(eventId, 'a BUDGET_EXHAUSTED session resumes only with a higher budget');
  }
  const raised = [
    event.budget.maxTokens !== undefined ? `maxTokens ${event.budget.maxTokens}` : '',
    event.budget.maxUsd !== undefined ? `maxUsd ${event.budget.maxUsd}` : '',
  ]
    .filter(Boolean)
    .join(', ');
  const reason = `resumed with a higher budget (${raised})`;
  const { failure: _stopped, ...rest } = stamp(session);
  const budget = { ...session.config.budget, ...event.budget };
  const raisedSession: Session = { ...rest, config: { ...session.config, budget } };
  const decision = (inputs: Record<string, unknown>): HistoryEntryDraft => ({
    type: 'decision',
    decision: 'resume:budget',
    reason,
    inputs: { ...inputs, budget: event.budget, requestId: event.requestId },
  });
  const stateChange = (to: Session['state']): HistoryEntryDraft => ({
    type: 'state_change',
    entity: 'session',
    from: 'BUDGET_EXHAUSTED',
    to,
    reason,
  });
  if (session.taskIds.length === 0) {
    const again = planAgain(raisedSession);
    return {
      changeset: {
        eventId,
        session: { record: again.record, expectedVersion: version },
        outbox: [again.job],
        budgetRaised: true,
        history: [decision(again.inputs), stateChange('PLANNING')],
      },
    };
  }

  const all = await ctx.store.loadTasks(session.id, session.taskIds);
  const targets = [...all.values()].filter((s) => s.task.state === 'CANCELLED');
  // Stopped in its integration (the final judge's call): the integration runs again.
  if (targets.length === 0 && session.integration) {
    return resumeIntegration(session, version, event, eventId, raisedSession);
  }
  if (targets.length === 0) {
    return ignore(eventId, 'the budget stopped the session with no task left to go on with');
  }
  const edits = new TaskEdits(session, all.values());
  for (const { task } of targets) {
    edits.put(
      { ...task, state: 'READY', replanPending: false, continuations: 0, feedback: undefined },
      reason,
    );
    if (task.pendingDependencies === 0) edits.dispatch(task.id, reason);
  }
  const slots = await fillSlots(ctx.store, edits, raisedSession);
  return {
    changeset: {
      eventId,
      ...slots,
      session: { record: { ...raisedSession, state: 'RUNNING' }, expectedVersion: version },
      tasks: edits.changes(),
      readTasks: edits.reads(),
      counters: edits.counterDelta(),
      outbox: edits.outbox,
      budgetRaised: true,
      history: [
        decision({ taskIds: targets.map((t) => t.task.id) }),
        stateChange('RUNNING'),
        ...edits.history,
      ],
    },
  };
}

/**
 * A session the budget stopped while planning asks the Planner again, as the next planning
 * attempt: the attempt the stop interrupted (its plan, if the Planner made one, was never
 * judged) gets no verdict, and a new attempt number gives the new plan and judge jobs ids of
 * their own (the interrupted attempt's ids are taken) and makes any late event of the old
 * attempt stale. The Planner gets the inputs the interrupted attempt had: the previous plan and
 * the feedback of the last refinement decision. The refinement counters are not advanced: the
 * interruption was no replan.
 */
function planAgain(session: Session): {
  record: Session;
  job: OutboxJob;
  inputs: Record<string, unknown>;
} {
  const interrupted = session.planning.attempt;
  const attempt = interrupted + 1;
  const feedback = session.planning.refinementHistory.at(-1)?.feedback;
  return {
    record: { ...session, state: 'PLANNING', planning: { ...session.planning, attempt } },
    job: planJob(session, attempt, feedback),
    inputs: { interruptedPlanAttempt: interrupted, planAttempt: attempt },
  };
}

/**
 * A model call of any role could not reserve its estimate (issue 4): the session stops in
 * BUDGET_EXHAUSTED instead of spending more, and every open task is CANCELLED so no further
 * job is scheduled. Any such failure counts, stale or not: the refusal is session-wide.
 */
async function stopOnBudget(
  ctx: CoordinatorContext,
  session: Session,
  version: number,
  event: JobFailedEvent,
  eventId: string,
  errorEntry: HistoryEntryDraft,
): Promise<Transition> {
  if (FINISHED_SESSION_STATES.includes(session.state))
    return ignore(eventId, `budget refusal after the session is ${session.state}`);
  // Every refusal leaves the usage hash marked until a resume raises the budget: an unmarked
  // hash means this refusal came before the raise and no longer holds.
  if (!(await ctx.store.budgetRefused(session.id))) {
    return recordOnly(eventId, errorEntry, 'the budget was raised after this refusal');
  }
  const reason = `budget exhausted: ${event.error}`;
  const tasks = await ctx.store.loadTasks(session.id, session.taskIds);
  const edits = new TaskEdits(session, tasks.values());
  // A task that asks a person a question stays BLOCKED with it: it runs no job, and its
  // question stays open to be answered once the budget is raised (a resume would otherwise run
  // it again without the answer, and leave the question open for ever).
  const asked = new Set((session.questions ?? []).map((q) => `${q.taskId}|${q.attempt}`));
  for (const { task } of tasks.values()) {
    if (task.state === 'BLOCKED' && asked.has(`${task.id}|${task.attempts}`)) continue;
    if (isOpen(task.state))
      edits.put({ ...task, state: 'CANCELLED', replanPending: false }, reason);
  }
  // The steps its cancelled executions wait at end with them (issue 48).
  const steps = endExecutionWaits(session, reason, 'BUDGET_EXHAUSTED');
  const record: Session = {
    ...stamp(steps.record),
    state: 'BUDGET_EXHAUSTED',
    failure: { code: 'BUDGET_EXHAUSTED', reason },
  };
  return {
    changeset: {
      eventId,
      session: { record, expectedVersion: version },
      tasks: edits.changes(),
      counters: edits.counterDelta(),
      ...(steps.outbox.length > 0 ? { outbox: steps.outbox } : {}),
      history: [
        errorEntry,
        ...steps.history,
        {
          type: 'state_change',
          entity: 'session',
          from: session.state,
          to: 'BUDGET_EXHAUSTED',
          reason,
        },
        ...edits.history,
      ],
    },
  };
}

/**
 * After a task transition: the session completes when no task is open, and is BLOCKED when
 * tasks are open but none is active (everything left waits on a blocked task).
 */
export async function finalizeSession(
  ctx: CoordinatorContext,
  sessionId: string,
  counters: Counters,
): Promise<Transition | undefined> {
  if (counters.open > 0 && counters.active > 0) return undefined;
  const { session, version } = await ctx.store.requireSession(sessionId);
  if (session.state !== 'RUNNING') return undefined;
  const eventId = `finalize|${sessionId}|${version}`;
  if (counters.open === 0) {
    const integrating = await startIntegration(ctx, session, version, eventId);
    if (integrating) return integrating;
    return {
      changeset: {
        eventId,
        requireStates: ['RUNNING'],
        requireCounters: { open: 0 },
        session: { record: { ...stamp(session), state: 'COMPLETED' }, expectedVersion: version },
        history: [
          {
            type: 'state_change',
            entity: 'session',
            from: 'RUNNING',
            to: 'COMPLETED',
            reason: 'every task is finished',
          },
        ],
      },
    };
  }
  const reason = `${counters.open} task(s) open and none can run: waiting for \`orq resume ${sessionId}\``;
  return {
    changeset: {
      eventId,
      requireStates: ['RUNNING'],
      requireCounters: { active: 0 },
      session: { record: { ...stamp(session), state: 'BLOCKED' }, expectedVersion: version },
      history: [
        { type: 'state_change', entity: 'session', from: 'RUNNING', to: 'BLOCKED', reason },
      ],
    },
  };
}
