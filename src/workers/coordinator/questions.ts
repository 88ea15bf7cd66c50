import type { HistoryEntryDraft } from '../../shared/domain/history.js';
import type { QuestionWait, WaitAnswer } from '../../shared/domain/human-wait.js';
import type { Session } from '../../shared/domain/session.js';
import type { Task } from '../../shared/domain/task.js';
import type { OutboxJob } from '../../shared/queues.js';
import { notifyJob } from './wait-notice.js';

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
