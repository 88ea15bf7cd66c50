import type { TaskCheckedEvent } from '../../shared/queues.js';
import type { TaskSnapshot } from '../../shared/store/session-records.js';
import type { CoordinatorContext, Transition } from './context.js';
import { ignore } from './context.js';
import { taskChangeset, TaskEdits } from './task-edits.js';

/**
 * judging.checkAlreadySatisfied (issue 50): the judge's word on a task before its first
 * execution. Met already (alreadySatisfied with success): SKIPPED, with the reason, and its
 * dependents go on, as after a verdict that says so (task-judged.ts). Otherwise its first work
 * job goes out. Only a RUNNING task on its first attempt, not yet checked, is moved: a repeated
 * or late answer changes nothing.
 */
export async function onTaskChecked(
  ctx: CoordinatorContext,
  event: TaskCheckedEvent,
  eventId: string,
): Promise<Transition> {
  const read = await ctx.store.requireForTask(event.sessionId, [event.taskId]);
  const { session } = read.snapshot;
  const snapshot = read.tasks.get(event.taskId);
  if (session.state !== 'RUNNING') return ignore(eventId, `session is ${session.state}`);
  if (!snapshot) return ignore(eventId, `task ${event.taskId} is unknown`);
  const task = snapshot.task;
  if (task.state !== 'RUNNING' || task.attempts !== 1 || task.checkedBeforeRun !== undefined) {
    return ignore(
      eventId,
      `stale check of ${task.id} (state ${task.state}, attempt ${task.attempts}, checked ${String(task.checkedBeforeRun)})`,
    );
  }

  const { judgement } = event;
  const satisfied = judgement.success && judgement.alreadySatisfied === true;
  const said = judgement.reason.trim() === '' ? 'no reason given' : judgement.reason.trim();
  const reason = satisfied
    ? `The judge found the task already satisfied before it ran, so it is skipped and its dependents go on (judge: ${said}).`
    : `The judge found the task not met yet before it ran, so it runs (judge: ${said}).`;
  const dependents = satisfied
    ? await ctx.store.loadTasks(event.sessionId, task.dependents)
    : new Map<string, TaskSnapshot>();
  const edits = new TaskEdits(session, [snapshot, ...dependents.values()]);
  edits.history.push(
    { type: 'judgement', subject: 'task', taskId: task.id, attempt: 0, judgement },
    {
      type: 'decision',
      taskId: task.id,
      decision: satisfied ? 'task:satisfied' : 'task:run',
      reason,
      inputs: { checkedBeforeRun: true },
    },
  );
  if (satisfied) {
    edits.put({ ...task, state: 'SKIPPED', judgement, checkedBeforeRun: true }, reason);
    edits.releaseDependents(task.id);
  } else {
    edits.put({ ...task, checkedBeforeRun: true });
    edits.sendToWorker(task.id, task.attempts);
  }
  return { changeset: await taskChangeset(ctx.store, eventId, edits, session) };
}
