import type { AnswerEvent } from '../../shared/queues.js';
import type { CoordinatorContext, Transition } from './context.js';
import { ignore } from './context.js';
import { onPlanAnswer } from './plan-approval.js';
import { answeredFeedback, openQuestionOf } from './questions.js';
import { resumeBlocked } from './session-events.js';
import { isExecutionWaitId, onStepAnswer } from './step-waits.js';

/**
 * A person's answer to a wait (issue 48), routed by the wait's kind: a plan approval
 * (plan-approval.ts), a question (questions.ts) or an agent's step (step-waits.ts).
 */
export async function onAnswer(
  ctx: CoordinatorContext,
  event: AnswerEvent,
  eventId: string,
): Promise<Transition> {
  if (event.waitId.startsWith('question-')) return onQuestionAnswer(ctx, event, eventId);
  if (isExecutionWaitId(event.waitId)) return onStepAnswer(ctx, event, eventId);
  return onPlanAnswer(ctx, event, eventId);
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
