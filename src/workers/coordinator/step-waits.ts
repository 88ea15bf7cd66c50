import type { HistoryEntryDraft } from '../../shared/domain/history.js';
import type {
  QuestionWait,
  StepApprovalWait,
  StepDecision,
} from '../../shared/domain/human-wait.js';
import type { Session } from '../../shared/domain/session.js';
import type { AnswerEvent, StepWaitingEvent, WaitTimedOutEvent } from '../../shared/queues.js';
import type { TaskSnapshot } from '../../shared/store/session-records.js';
import type { CoordinatorContext, Transition } from './context.js';
import { ignore, ignoreQuietly } from './context.js';
import { notifyJob } from './wait-notice.js';
import { waitTimerJob } from './wait-timer.js';
import { isActive, taskChangeset, TaskEdits } from './task-edits.js';

/**
 * Waits inside a running execution (issue 48): a step approval (approval.steps) and an agent's
 * ask_human question. The executor recorded the step in its journal and its work job ended;
 * the worker's step-waiting event opens the wait here. The task stays RUNNING (the session goes
 * on, and neither blocks nor finishes meanwhile), but nothing of it is queued or running: it
 * holds no worker, lock, tenant slot or quota place. A person's answer closes the wait and
 * queues a work job for the SAME execution carrying the decision (ExecuteJob.resume), through
 * the outbox of the same write, so a crash between the two loses nothing. With
 * approval.stepTimeoutSeconds, a timer ends a wait nobody answered as onStepTimeout says, through
 * the same path an answer takes.
 */

/** One wait per step of an execution: an answer to an earlier step's is stale. */
export const stepWaitId = (taskId: string, attempt: number, step: number): string =>
  `step-${taskId}-${attempt}-${step}`;
/** An agent's question: kept with the Judge's in session.questions, with its step. */
export const askWaitId = (taskId: string, attempt: number, step: number): string =>
  `ask-${taskId}-${attempt}-${step}`;

/** Whether an answer's wait id names a wait of a running execution. */
export const isExecutionWaitId = (waitId: string): boolean =>
  waitId.startsWith('step-') || waitId.startsWith('ask-');

type AgentQuestion = QuestionWait & { step: number };
type ExecutionWait = StepApprovalWait | AgentQuestion;

/** The open waits of running executions, step approvals and agents' questions. */
export function executionWaits(session: Session): ExecutionWait[] {
  return [
    ...(session.stepWaits ?? []),
    ...(session.questions ?? []).filter((q): q is AgentQuestion => q.step !== undefined),
  ];
}

/** The task's execution still waits at `attempt`: RUNNING at that attempt, not replaced. */
function stillWaits(snapshot: TaskSnapshot | undefined, attempt: number): boolean {
  const task = snapshot?.task;
  return !!task && isActive(task.state) && !task.replanPending && task.attempts === attempt;
}

/** The session with `wait` added to its open waits, or without the wait `removed`. */
function withWait(session: Session, wait: ExecutionWait): Session {
  return wait.kind === 'step-approval'
    ? { ...session, stepWaits: [...(session.stepWaits ?? []), wait] }
    : { ...session, questions: [...(session.questions ?? []), wait] };
}

function withoutWait(session: Session, waitId: string): Session {
  const { stepWaits = [], questions = [], ...rest } = session;
  const steps = stepWaits.filter((w) => w.id !== waitId);
  const asked = questions.filter((q) => q.id !== waitId);
  return {
    ...rest,
    ...(steps.length > 0 ? { stepWaits: steps } : {}),
    ...(asked.length > 0 ? { questions: asked } : {}),
  };
}

/** An execution stopped at a step needing a person: the wait opens on the session. */
export async function onStepWaiting(
  ctx: CoordinatorContext,
  event: StepWaitingEvent,
  eventId: string,
): Promise<Transition> {
  const { snapshot, tasks } = await ctx.store.requireForTask(event.sessionId, [event.taskId]);
  const { session, version } = snapshot;
  if (session.state !== 'RUNNING') return ignore(eventId, `session is ${session.state}`);
  const task = tasks.get(event.taskId);
  if (!task || !stillWaits(task, event.attempt)) {
    return ignore(
      eventId,
      `stale step wait for attempt ${event.attempt} of ${event.taskId} (state ${task?.task.state}, attempt ${task?.task.attempts})`,
    );
  }
  const { request } = event;
  const { approval } = session.config;
  const now = Date.now();
  const openedAt = new Date(now).toISOString();
  const timeoutAt =
    approval.stepTimeoutSeconds !== undefined
      ? now + approval.stepTimeoutSeconds * 1000
      : undefined;
  const timing = timeoutAt !== undefined ? { timeoutAt: new Date(timeoutAt).toISOString() } : {};
  const wait: ExecutionWait =
    request.kind === 'question'
      ? {
          id: askWaitId(event.taskId, event.attempt, request.step),
          kind: 'question',
          openedAt,
          ...timing,
          taskId: event.taskId,
          attempt: event.attempt,
          step: request.step,
          question: request.question,
          reason: `the agent asked a person at step ${request.step}`,
        }
      : {
          id: stepWaitId(event.taskId, event.attempt, request.step),
          kind: 'step-approval',
          openedAt,
          ...(timeoutAt !== undefined ? { ...timing, onTimeout: approval.onStepTimeout } : {}),
          taskId: event.taskId,
          attempt: event.attempt,
          step: request.step,
          tool: request.tool,
          input: request.input,
          ...(request.command !== undefined ? { command: request.command } : {}),
          rule: request.rule,
        };
  if (executionWaits(session).some((w) => w.id === wait.id)) {
    return ignore(eventId, `the wait ${wait.id} is open already`);
  }
  const what =
    wait.kind === 'question'
      ? `asks a person: ${wait.question}`
      : `waits for a person to approve ${wait.command !== undefined ? `\`${wait.command}\`` : wait.tool} (${wait.rule})`;
  return {
    changeset: {
      eventId,
      requireStates: ['RUNNING'],
      session: {
        record: { ...withWait(session, wait), updatedAt: openedAt },
        expectedVersion: version,
      },
      readTasks: [task],
      outbox: [
        notifyJob(session, wait, 'wait.opened', session.state),
        ...(timeoutAt !== undefined ? [waitTimerJob(session.id, wait.id, timeoutAt)] : []),
      ],
      history: [
        {
          type: 'decision',
          taskId: event.taskId,
          decision: `${wait.kind}:opened`,
          reason: `task ${event.taskId} ${what}`,
          inputs: { waitId: wait.id, attempt: event.attempt, step: request.step },
        },
        {
          type: 'wait',
          taskId: event.taskId,
          action: 'opened',
          waitId: wait.id,
          kind: wait.kind,
          wait,
        },
      ],
    },
  };
}

/** The open wait `waitId` of a running execution, or why an answer to it changes nothing. */
function openExecutionWait(session: Session, waitId: string): ExecutionWait | string {
  if (session.state !== 'RUNNING') {
    return `the wait ${waitId} is no longer open: session ${session.id} is ${session.state}`;
  }
  const found = executionWaits(session).find((w) => w.id === waitId);
  if (found) return found;
  const now = executionWaits(session).map((w) => w.id);
  return `the wait ${waitId} is no longer open${now.length > 0 ? `: session ${session.id} waits on ${now.join(', ')}` : ''}`;
}

/**
 * A person answered a step approval (approve, reject with a reason) or an agent's question: the
 * wait closes, and the same execution resumes with the decision.
 */
export async function onStepAnswer(
  ctx: CoordinatorContext,
  event: AnswerEvent,
  eventId: string,
): Promise<Transition> {
  const { session, version } = await ctx.store.requireSession(event.sessionId);
  const wait = openExecutionWait(session, event.waitId);
  if (typeof wait === 'string') return ignore(eventId, wait);
  const { answer } = event;
  if (wait.kind === 'question' && answer.action !== 'answer') {
    return ignore(eventId, `the wait ${wait.id} is an agent's question: answer it with a text`);
  }
  if (wait.kind === 'step-approval' && answer.action !== 'approve' && answer.action !== 'reject') {
    return ignore(eventId, `the wait ${wait.id} is a step approval: approve or reject it`);
  }
  const text =
    answer.action === 'answer'
      ? answer.text
      : answer.action === 'reject'
        ? answer.feedback
        : answer.action === 'approve'
          ? answer.comment
          : undefined;
  const decision: StepDecision = {
    waitId: wait.id,
    step: wait.step,
    action:
      answer.action === 'answer' ? 'answer' : answer.action === 'approve' ? 'approve' : 'reject',
    ...(text !== undefined ? { text } : {}),
    ...(event.by ? { by: event.by } : {}),
  };
  const by = event.by ? ` by ${event.by}` : '';
  const reason =
    decision.action === 'answer'
      ? `the agent's question was answered${by}: task ${wait.taskId} goes on`
      : decision.action === 'approve'
        ? `step ${wait.step} of task ${wait.taskId} approved${by}: it runs`
        : `step ${wait.step} of task ${wait.taskId} rejected${by}: the executor hears why`;
  return resumeExecution(ctx, eventId, session, version, wait, decision, {
    outcome: `answered:${decision.action}`,
    history: [
      {
        type: 'wait',
        taskId: wait.taskId,
        action: 'answered',
        waitId: wait.id,
        kind: wait.kind,
        answer,
        ...(event.by ? { by: event.by } : {}),
      },
      {
        type: 'decision',
        taskId: wait.taskId,
        decision: `${wait.kind}:${decision.action}`,
        reason,
        inputs: {
          waitId: wait.id,
          requestId: event.requestId,
          step: wait.step,
          ...(text !== undefined ? { text } : {}),
          ...(event.by ? { by: event.by } : {}),
        },
      },
    ],
  });
}

/**
 * approval.stepTimeoutSeconds passed with the wait still open: a step approval is decided as
 * approval.onStepTimeout says, an agent's question gets no answer; either way the execution
 * resumes as after a person's answer. A timer whose wait ended first (answered, cancelled) does
 * nothing: that end is in the history already.
 */
export async function onExecutionWaitTimedOut(
  ctx: CoordinatorContext,
  event: WaitTimedOutEvent,
  eventId: string,
): Promise<Transition> {
  const { session, version } = await ctx.store.requireSession(event.sessionId);
  const wait = openExecutionWait(session, event.waitId);
  if (typeof wait === 'string') return ignoreQuietly(eventId, wait);
  const seconds = session.config.approval.stepTimeoutSeconds;
  const action = wait.kind === 'question' ? 'answer' : (wait.onTimeout ?? 'reject');
  const text =
    wait.kind === 'question'
      ? `nobody answered within ${seconds} s (approval.stepTimeoutSeconds)`
      : `nobody answered within ${seconds} s (approval.onStepTimeout: ${action})`;
  const decision: StepDecision = { waitId: wait.id, step: wait.step, action, text, timedOut: true };
  const reason =
    action === 'answer'
      ? `nobody answered the agent's question within ${seconds} s: task ${wait.taskId} goes on without an answer`
      : action === 'approve'
        ? `step ${wait.step} of task ${wait.taskId} approved on its timeout (approval.onStepTimeout: approve): it runs`
        : `step ${wait.step} of task ${wait.taskId} rejected on its timeout: ${text}; the executor hears why`;
  return resumeExecution(ctx, eventId, session, version, wait, decision, {
    outcome: action === 'answer' ? 'timed-out' : `timed-out:${action}`,
    history: [
      {
        type: 'wait',
        taskId: wait.taskId,
        action: 'timed-out',
        waitId: wait.id,
        kind: wait.kind,
        // The action the config named, as a plan approval's timeout records it.
        ...(action === 'approve'
          ? { answer: { action: 'approve' as const } }
          : action === 'reject'
            ? { answer: { action: 'reject' as const, feedback: text } }
            : {}),
      },
      {
        type: 'decision',
        taskId: wait.taskId,
        decision: action === 'answer' ? 'question:timed-out' : `${wait.kind}:${action}`,
        reason,
        inputs: { waitId: wait.id, step: wait.step, timedOut: true, timeoutSeconds: seconds },
      },
    ],
  });
}

/**
 * The wait closes and the same execution resumes with `decision`: a work job for it, through the
 * outbox of the write that closes the wait. `closing` is what the history and the webhook hear.
 */
async function resumeExecution(
  ctx: CoordinatorContext,
  eventId: string,
  session: Session,
  version: number,
  wait: ExecutionWait,
  decision: StepDecision,
  closing: { outcome: string; history: HistoryEntryDraft[] },
): Promise<Transition> {
  const loaded = (await ctx.store.loadTasks(session.id, [wait.taskId])).get(wait.taskId);
  if (!loaded || !stillWaits(loaded, wait.attempt)) {
    return ignore(eventId, `the wait ${wait.id} is no longer open: task ${wait.taskId} moved on`);
  }
  const edits = new TaskEdits(session, [loaded]);
  // Written (same state) so a change to the task meanwhile fences this write; it names the job
  // that carries the execution on, for status views.
  edits.put({ ...loaded.task, resumedAfter: { attempt: wait.attempt, waitId: wait.id } });
  edits.sendToWorker(wait.taskId, wait.attempt, decision);
  edits.history.push(...closing.history);
  edits.outbox.push(notifyJob(session, wait, 'wait.closed', session.state, closing.outcome));
  const record = { ...withoutWait(session, wait.id), updatedAt: new Date().toISOString() };
  return {
    changeset: await taskChangeset(ctx.store, eventId, edits, session, {
      record,
      expectedVersion: version,
    }),
  };
}

/**
 * Ends every wait of a running execution when the session stops its tasks (its budget ran out:
 * they are CANCELLED): the record goes, the history says so, and the webhook hears it. A resume
 * runs those tasks afresh, and their steps ask again.
 */
export function endExecutionWaits(
  session: Session,
  reason: string,
  state: Session['state'],
): { record: Session; history: HistoryEntryDraft[]; outbox: ReturnType<typeof notifyJob>[] } {
  const open = executionWaits(session);
  if (open.length === 0) return { record: session, history: [], outbox: [] };
  const record = open.reduce((s, wait) => withoutWait(s, wait.id), session);
  return {
    record,
    history: open.map((wait) => ({
      type: 'wait' as const,
      taskId: wait.taskId,
      action: 'cancelled' as const,
      waitId: wait.id,
      kind: wait.kind,
      by: reason,
    })),
    outbox: open.map((wait) => notifyJob(session, wait, 'wait.closed', state, 'cancelled')),
  };
}
