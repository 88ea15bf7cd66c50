import { describe, expect, it } from 'vitest';
import { Task, type TaskState } from '../../src/shared/domain/task.js';
import { TaskEdits } from '../../src/workers/coordinator/task-edits.js';

const T0 = '2026-01-02T03:00:00.000Z';
const T1 = '2026-01-02T03:01:00.000Z';
const T2 = '2026-01-02T03:02:00.000Z';

/** One transition at time `at` over the task as the last one left it. */
function transition(task: Task, at: string, edit: (edits: TaskEdits) => void): Task {
  const edits = new TaskEdits(
    {
      id: 's1',
      tenant: 'default',
      priority: 5,
      config: { judging: { checkAlreadySatisfied: false } },
    },
    [{ task, version: 1 }],
    at,
  );
  edit(edits);
  // What the transition made runnable goes to a worker (no slot limit here).
  edits.fillSlots();
  return edits.get(task.id);
}

const ready = Task.parse({ id: 't1', title: 'T1', acceptance: 'done' });
const moved = (state: TaskState) => (edits: TaskEdits) =>
  edits.put({ ...edits.get('t1'), state }, `to ${state}`);

describe('TaskEdits: when a task runs', () => {
  it('starts an execution at its dispatch and ends it when the task stops running', () => {
    const running = transition(ready, T0, (e) => e.dispatch('t1', 'go'));
    expect(running).toMatchObject({ state: 'RUNNING', startedAt: T0 });
    expect(running.endedAt).toBeUndefined();
    const done = transition(running, T1, moved('DONE'));
    expect(done).toMatchObject({ startedAt: T0, endedAt: T1 });
  });

  it.each(['BLOCKED', 'CANCELLED', 'REPLACED_BY_REPLAN', 'READY'] as const)(
    'ends the execution when a running task becomes %s',
    (state) => {
      const running = transition(ready, T0, (e) => e.dispatch('t1', 'go'));
      expect(transition(running, T1, moved(state)).endedAt).toBe(T1);
    },
  );

  it('keeps a continued task running: its next execution starts at its next dispatch', () => {
    const running = transition(ready, T0, (e) => e.dispatch('t1', 'go'));
    const continued = transition(running, T1, moved('NEEDS_CONTINUATION'));
    expect(continued.endedAt).toBeUndefined();
    const again = transition(continued, T2, (e) =>
      e.dispatch('t1', 'continue', 'NEEDS_CONTINUATION'),
    );
    expect(again).toMatchObject({ attempts: 2, startedAt: T2 });
  });

  it('starts a retried task afresh: the end of its last execution is dropped', () => {
    const running = transition(ready, T0, (e) => e.dispatch('t1', 'go'));
    const blocked = transition(running, T1, moved('BLOCKED'));
    const retried = transition(blocked, T2, (e) => e.dispatch('t1', 'resume'));
    expect(retried).toMatchObject({ state: 'RUNNING', attempts: 2, startedAt: T2 });
    expect(retried.endedAt).toBeUndefined();
  });

  it('writes no time for a task that never ran', () => {
    const cancelled = transition(ready, T0, moved('CANCELLED'));
    expect(cancelled.startedAt).toBeUndefined();
    expect(cancelled.endedAt).toBeUndefined();
  });
});
