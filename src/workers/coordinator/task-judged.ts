import type { Session } from '../../shared/domain/session.js';
import { inBand } from '../../shared/fair-release.js';
import { jobIds, outboxJob, type TaskJudgedEvent } from '../../shared/queues.js';
import { inlineResult, taskCard } from '../../shared/task-card.js';
import { decideTaskOutcome } from '../../shared/rules/task-outcome.js';
import type { TaskSnapshot } from '../../shared/store/session-records.js';
import type { CoordinatorContext, Transition } from './context.js';
import { ignore } from './context.js';
import { isActive, taskChangeset, TaskEdits } from './task-edits.js';
import { openQuestion } from './questions.js';

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

  // A long result rides as a reference (storedResult): read here, where it is recorded.
  const result =
    event.result ??
    (await ctx.store.loadResult(event.sessionId, task.id, event.attempt, event.fence));
  if (!result) {
    return ignore(eventId, `the result of attempt ${event.attempt} of ${task.id} is not stored`);
  }

  const outcome = decideTaskOutcome({
    judgement: event.judgement,
    task,
    replanning: session.config.replanning,
    execution: session.config.execution,
  });

  const releases = outcome.kind === 'done' || outcome.kind === 'satisfied';
  const dependents = releases
    ? (ctx.store.writtenTasks(event.sessionId, task.dependents)?.tasks ??
      (await ctx.store.loadTasks(event.sessionId, task.dependents)))
    : new Map<string, TaskSnapshot>();
  const edits = new TaskEdits(session, [snapshot, ...dependents.values()]);
  edits.history.push(
    {
      type: 'execution',
      taskId: task.id,
      attempt: event.attempt,
      result,
      // Names the judge job (its id carries a later delivery's fence) for the session view.
      ...(event.fence && event.fence > 1 ? { fence: event.fence } : {}),
    },
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
  const judged = { ...task, result, judgement: event.judgement };

  switch (outcome.kind) {
    case 'done':
      edits.put({ ...judged, state: 'DONE', feedback: undefined }, outcome.reason);
      edits.releaseDependents(task.id);
      break;
    case 'satisfied':
      edits.put({ ...judged, state: 'SKIPPED', feedback: undefined }, outcome.reason);
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
        inBand(
          session,
          outboxJob(
            'replan',
            'replan-task',
            jobIds.replan(event.sessionId, task.id, event.attempt),
            {
              sessionId: event.sessionId,
              taskId: task.id,
              attempt: event.attempt,
              task: taskCard(judged, event.attempt, edits.nextVersion(task.id)),
              judgement: event.judgement,
              ...(inlineResult(result) ? { result } : {}),
            },
          ),
        ),
      );
      break;
    case 'blocked':
      edits.put({ ...judged, state: 'BLOCKED' }, outcome.reason);
      break;
  }

  // A blocking verdict that asks a person something opens a question (issue 48): the session
  // record keeps it, so this transition writes the record as read now, not the cached parts.
  let record: { record: Session; expectedVersion: number } | undefined;
  if (outcome.kind === 'blocked' && event.judgement.question) {
    const fresh = await ctx.store.requireSession(event.sessionId);
    const asked = openQuestion(
      fresh.session,
      task,
      event.attempt,
      event.judgement.question,
      outcome.reason,
    );
    record = { record: asked.record, expectedVersion: fresh.version };
    edits.history.push(...asked.history);
    edits.outbox.push(...asked.outbox);
  }

  const changeset = await taskChangeset(ctx.store, eventId, edits, session, record);
  return {
    // The task's record and history hold the result now: the stored copy is not read again
    // (a later delivery of this attempt's judge job or verdict finds the task moved on).
    ...(event.result
      ? {}
      : {
          applied: () => ctx.store.dropResult(event.sessionId, task.id, event.attempt, event.fence),
        }),
    changeset: {
      ...changeset,
      // The verdict is on this work delivery's result: refused if a later delivery started.
      ...(event.fence
        ? { fence: { taskId: task.id, attempt: event.attempt, value: event.fence } }
        : {}),
    },
  };
}
