import type { Session } from '../../shared/domain/session.js';
import { jobIds, outboxJob, type TaskJudgedEvent } from '../../shared/queues.js';
import { decideTaskOutcome } from '../../shared/rules/task-outcome.js';
import type { TaskSnapshot } from '../../shared/store/session-store.js';
import type { CoordinatorContext, Transition } from './context.js';
import { ignore } from './context.js';
import { isActive, TaskEdits } from './task-edits.js';

/**
 * Seed 001: apply the Judge's verdict on one execution: done, continue, replan or blocked.
 * The task comes from what this process wrote last when it has it (no round trip; the apply
 * checks its version and the session's state); a verdict found stale there is checked against
 * a fresh read before it is ignored, as another coordinator may have moved the task on.
 */
export async function onTaskJudged(
  ctx: CoordinatorContext,
  event: TaskJudgedEvent,
  eventId: string,
): Promise<Transition> {
  const written = ctx.store.writtenTasks(event.sessionId, [event.taskId]);
  const snapshot = written?.tasks.get(event.taskId);
  if (written && snapshot) {
    const transition = await judged(ctx, event, eventId, written.session, snapshot);
    if (!('ignore' in transition)) return transition;
  }
  const read = await ctx.store.requireForTask(event.sessionId, [event.taskId]);
  const { session } = read.snapshot;
  const current = read.tasks.get(event.taskId);
  if (session.state !== 'RUNNING') return ignore(eventId, `session is ${session.state}`);
  if (!current) return ignore(eventId, `task ${event.taskId} is unknown`);
  return judged(ctx, event, eventId, session, current);
}

/** The transition of a verdict on `snapshot`, a task of a RUNNING session. */
async function judged(
  ctx: CoordinatorContext,
  event: TaskJudgedEvent,
  eventId: string,
  session: Session,
  snapshot: TaskSnapshot,
): Promise<Transition> {
  const task = snapshot.task;
  // Out-of-order or duplicated verdicts (an older attempt, a task already moved on) change nothing.
  if (!isActive(task.state) || task.replanPending || task.attempts !== event.attempt) {
    return ignore(
      eventId,
      `stale judgement for attempt ${event.attempt} of ${task.id} (state ${task.state}, attempt ${task.attempts})`,
    );
  }

  const outcome = decideTaskOutcome({
    judgement: event.judgement,
    task,
    replanning: session.config.replanning,
    execution: session.config.execution,
  });

  const dependents =
    outcome.kind === 'done'
      ? (ctx.store.writtenTasks(event.sessionId, task.dependents)?.tasks ??
        (await ctx.store.loadTasks(event.sessionId, task.dependents)))
      : new Map<string, TaskSnapshot>();
  const edits = new TaskEdits(event.sessionId, [snapshot, ...dependents.values()]);
  edits.history.push(
    { type: 'execution', taskId: task.id, attempt: event.attempt, result: event.result },
    {
      type: 'judgement',
      subject: 'task',
      taskId: task.id,
      attempt: event.attempt,
      judgement: event.judgement,
    },
    {
      type: 'decision',
      taskId: task.id,
      decision: `task:${outcome.kind}`,
      reason: outcome.reason,
      inputs: {
        attempt: event.attempt,
        continuations: task.continuations,
        replanIteration: task.replanningInfo?.iteration ?? 0,
        maxIterations:
          task.replanningInfo?.maxIterations ?? session.config.replanning.maxIterations,
        maxContinuations: session.config.execution.maxContinuations,
        ...(outcome.kind === 'blocked' ? { cause: outcome.cause } : {}),
      },
    },
  );
  const judged = { ...task, result: event.result, judgement: event.judgement };

  switch (outcome.kind) {
    case 'done':
      edits.put({ ...judged, state: 'DONE', feedback: undefined }, outcome.reason);
      edits.releaseDependents(task.id);
      break;
    case 'continue':
      edits.put(
        {
          ...judged,
          state: 'NEEDS_CONTINUATION',
          continuations: outcome.nextContinuations,
          feedback: outcome.feedback,
        },
        outcome.reason,
      );
      edits.dispatch(task.id, 'continuation with judge feedback', 'NEEDS_CONTINUATION');
      break;
    case 'replan':
      edits.put({ ...judged, replanPending: true });
      edits.outbox.push(
        outboxJob('replan', 'replan-task', jobIds.replan(event.sessionId, task.id, event.attempt), {
          sessionId: event.sessionId,
          taskId: task.id,
          attempt: event.attempt,
        }),
      );
      break;
    case 'blocked':
      edits.put({ ...judged, state: 'BLOCKED' }, outcome.reason);
      break;
  }

  return {
    changeset: {
      eventId,
      requireStates: ['RUNNING'],
      tasks: edits.changes(),
      readTasks: edits.reads(),
      counters: edits.counterDelta(),
      outbox: edits.outbox,
      history: edits.history,
    },
  };
}
