import type { HistoryEntryDraft } from '../../shared/domain/history.js';
import type { QuestionWait, WaitAnswer } from '../../shared/domain/human-wait.js';
import type { Session } from '../../shared/domain/session.js';
import type { Task } from '../../shared/domain/task.js';
import type { AnswerEvent, OutboxJob } from '../../shared/queues.js';
import type { CoordinatorContext, Transition } from './context.js';
import { ignore } from './context.js';
import { notifyJob } from './plan-approval.js';
import { resumeBlocked } from './session-events.js';

/**
 * Questions (issue 48): the Judge blocks a task for information only a person has and says
 * what it needs (`question` in its verdict). The task is BLOCKED as any blocked task is, and
 * the session keeps the question open (session.questions) until a person answers it, a resume
 * of the task ends it, or the session is cancelled. An answer is a resume --note of that one
 * task, the question kept beside the answer in the task's feedback.
 */

/** One question per blocked execution: an answer to an earlier block of the task is stale. */
export const questionWaitId = (taskId: string, attempt: number): string =>
  `question-${taskId}-${attempt}`;

/** The question a blocking verdict on `task`'s `attempt` opens, with its history and webhook. */
export function openQuestion(
  session: Session,
  task: Pick<Task, 'id'>,
  attempt: number,
  question: string,
  reason: string,
): { record: Session; history: HistoryEntryDraft[]; outbox: OutboxJob[] } {
  const now = new Date().toISOString();
  const wait: QuestionWait = {
    id: questionWaitId(task.id, attempt),
    kind: 'question',
    openedAt: now,
    taskId: task.id,
    attempt,
    question,
    reason,
  };
  const others = (session.questions ?? []).filter((q) => q.taskId !== task.id);
  return {
    record: { ...session, updatedAt: now, questions: [...others, wait] },
    history: [{ type: 'wait', action: 'opened', waitId: wait.id, kind: wait.kind, wait }],
    outbox: [notifyJob(session, wait, 'wait.opened', session.state)],
  };
}

/** How the questions of resumed tasks end: answered (an answer, a resume's note) or cancelled. */
export interface QuestionClosing {
  answer?: WaitAnswer & { action: 'answer' };
  by?: string | undefined;
}

/**
 * Ends the open questions of `taskIds`, which a resume or an answer runs again or skips: the
 * session without them, a `wait` entry for each and the webhook's wait.closed.
 */
export function closeQuestions(
  session: Session,
  taskIds: ReadonlySet<string>,
  closing: QuestionClosing,
  state: Session['state'],
): { record: Session; history: HistoryEntryDraft[]; outbox: OutboxJob[] } {
  const open = session.questions ?? [];
  const ending = open.filter((q) => taskIds.has(q.taskId));
  if (ending.length === 0) return { record: session, history: [], outbox: [] };
  const { questions: _all, ...rest } = session;
  const left = open.filter((q) => !taskIds.has(q.taskId));
  const action = closing.answer ? 'answered' : 'cancelled';
  return {
    record: left.length > 0 ? { ...rest, questions: left } : rest,
    history: ending.map((q) => ({
      type: 'wait' as const,
      action,
      waitId: q.id,
      kind: q.kind,
      ...(closing.answer ? { answer: closing.answer } : {}),
      ...(closing.by ? { by: closing.by } : {}),
    })),
    outbox: ending.map((q) =>
      notifyJob(session, q, 'wait.closed', state, closing.answer ? 'answered:answer' : 'cancelled'),
    ),
  };
}

/** The feedback an answered question gives the task's next execution. */
export const answeredFeedback = (question: string, answer: string): string =>
  `The judge asked a person: ${question}\nTheir answer: ${answer}`;

/** The session's open question `waitId`, or why an answer to it changes nothing. */
export function openQuestionOf(session: Session, waitId: string): QuestionWait | string {
  const found = (session.questions ?? []).find((q) => q.id === waitId);
  if (found) return found;
  const now = (session.questions ?? []).map((q) => q.id);
  return `the wait ${waitId} is no longer open: session ${session.id} is ${session.state}${
    now.length > 0 ? ` and asks ${now.join(', ')}` : ''
  }`;
}

/** A person answered a question: the task runs again with the question and the answer. */
export async function onQuestionAnswer(
  ctx: CoordinatorContext,
  event: AnswerEvent,
  eventId: string,
): Promise<Transition> {
  const { session, version } = await ctx.store.requireSession(event.sessionId);
  if (session.state === 'BUDGET_EXHAUSTED') {
    return ignore(
      eventId,
      `session ${session.id} is stopped by its budget (BUDGET_EXHAUSTED): its questions stay open; raise the budget (orq resume ${session.id} --max-tokens <n>), then answer again`,
    );
  }
  if (session.state !== 'BLOCKED' && session.state !== 'RUNNING') {
    return ignore(
      eventId,
      `the wait ${event.waitId} is no longer open: session ${session.id} is ${session.state}`,
    );
  }
  const question = openQuestionOf(session, event.waitId);
  if (typeof question === 'string') return ignore(eventId, question);
  if (event.answer.action !== 'answer') {
    return ignore(eventId, `the wait ${question.id} is a question: answer it with a text`);
  }
  const task = await ctx.store.loadTask(session.id, question.taskId);
  if (task?.task.state !== 'BLOCKED' || task.task.attempts !== question.attempt) {
    return ignore(
      eventId,
      `the wait ${question.id} is no longer open: task ${question.taskId} moved on`,
    );
  }
  return resumeBlocked(
    ctx,
    session,
    version,
    {
      sessionId: session.id,
      mode: 'continue',
      taskIds: [question.taskId],
      note: answeredFeedback(question.question, event.answer.text),
      requestId: event.requestId,
    },
    eventId,
    {
      decision: 'question:answer',
      closing: { answer: event.answer, by: event.by },
      inputs: { waitId: question.id, ...(event.by ? { by: event.by } : {}) },
    },
  );
}
