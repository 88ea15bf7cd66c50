import { describe, it, expect } from 'vitest';
import { PlannedTask } from '../../src/shared/domain/plan.js';
import { Task, type TaskInput } from '../../src/shared/domain/task.js';
import { OrqError } from '../../src/shared/errors.js';
import { replaceTaskWithSubtasks } from '../../src/shared/rules/replace-task.js';

function task(id: string, dependencies: string[] = [], extra: Partial<TaskInput> = {}): Task {
  return Task.parse({ id, title: `task ${id}`, acceptance: `${id} works`, dependencies, ...extra });
}

function planned(id: string, dependencies: string[] = [], extra: Partial<PlannedTask> = {}) {
  return PlannedTask.parse({
    id,
    title: `subtask ${id}`,
    acceptance: `${id} works`,
    dependencies,
    ...extra,
  });
}

/** A → {B, C} → D, with `dependents` and `pendingDependencies` kept as the coordinator keeps them. */
function diamond(): Task[] {
  return [
    task('A', [], { state: 'DONE', dependents: ['B', 'C'] }),
    task('B', ['A'], { state: 'RUNNING', dependents: ['D'], attempts: 1 }),
    task('C', ['A'], { dependents: ['D'] }),
    task('D', ['B', 'C'], { pendingDependencies: 2 }),
  ];
}

/** B replaced by the chain B1 → B2. */
function replaceBInDiamond(tasks = diamond()) {
  return replaceTaskWithSubtasks({
    tasks,
    originalTaskId: 'B',
    subtasks: [planned('B1'), planned('B2', ['B1'])],
    reason: 'scope too big',
    maxIterations: 3,
  });
}

const byId = (tasks: Task[], id: string): Task => {
  const found = tasks.find((t) => t.id === id);
  if (!found) throw new Error(`no task ${id}`);
  return found;
};

function expectInvalidState(run: () => unknown, details: Record<string, unknown>): void {
  let thrown: unknown;
  try {
    run();
  } catch (error) {
    thrown = error;
  }
  expect(thrown).toBeInstanceOf(OrqError);
  expect((thrown as OrqError).code).toBe('INVALID_STATE');
  expect((thrown as OrqError).details).toMatchObject(details);
}

describe('replaceTaskWithSubtasks: a diamond A → {B, C} → D with B replaced by B1 → B2', () => {
  it('gives the subtasks ids derived from the original and the iteration', () => {
    expect(replaceBInDiamond().newTaskIds).toEqual(['B.r1.1', 'B.r1.2']);
  });

  it('places the subtasks right after the original', () => {
    expect(replaceBInDiamond().tasks.map((t) => t.id)).toEqual([
      'A',
      'B',
      'B.r1.1',
      'B.r1.2',
      'C',
      'D',
    ]);
  });

  it('makes D depend on the last subtask B2 and on C', () => {
    const { tasks } = replaceBInDiamond();
    expect(byId(tasks, 'D').dependencies).toEqual(['B.r1.2', 'C']);
  });

  it('reports D as rewired', () => {
    expect(replaceBInDiamond().rewiredTaskIds).toEqual(['D']);
  });

  it('makes the first subtask B1 depend on A, as B did', () => {
    expect(byId(replaceBInDiamond().tasks, 'B.r1.1').dependencies).toEqual(['A']);
  });

  it('makes B2 depend on B1 and on the original dependency A', () => {
    expect(byId(replaceBInDiamond().tasks, 'B.r1.2').dependencies).toEqual(['A', 'B.r1.1']);
  });

  it('marks the original B REPLACED_BY_REPLAN, naming the subtasks and the reason', () => {
    const b = byId(replaceBInDiamond().tasks, 'B');
    expect(b.state).toBe('REPLACED_BY_REPLAN');
    expect(b.replanningInfo).toEqual({
      iteration: 0,
      maxIterations: 3,
      replacedBy: ['B.r1.1', 'B.r1.2'],
      replanReason: 'scope too big',
    });
  });

  it('starts each subtask READY with no attempts or continuations, at iteration 1 of the chain rooted at B', () => {
    const { tasks, newTaskIds } = replaceBInDiamond();
    for (const id of newTaskIds) {
      const subtask = byId(tasks, id);
      expect(subtask).toMatchObject({ state: 'READY', attempts: 0, continuations: 0 });
      expect(subtask.replanningInfo).toEqual({
        iteration: 1,
        maxIterations: 3,
        originalTaskId: 'B',
        replanReason: 'scope too big',
      });
    }
  });

  it('copies the title, acceptance, context and scope the Replanner gave', () => {
    const { tasks } = replaceTaskWithSubtasks({
      tasks: diamond(),
      originalTaskId: 'B',
      subtasks: [planned('x', [], { context: 'use zod', scopePaths: ['src/auth'] })],
      reason: 'r',
      maxIterations: 3,
    });
    expect(byId(tasks, 'B.r1.1')).toMatchObject({
      title: 'subtask x',
      acceptance: 'x works',
      context: 'use zod',
      scopePaths: ['src/auth'],
    });
  });

  it('leaves A, C and the other fields of D unchanged', () => {
    const before = diamond();
    const { tasks } = replaceBInDiamond(before);
    expect(byId(tasks, 'C')).toBe(before[2]);
    expect(byId(tasks, 'D').title).toBe('task D');
    expect(byId(tasks, 'A').state).toBe('DONE');
  });

  it('does not mutate its input', () => {
    const before = diamond();
    const snapshot = structuredClone(before);
    const subtasks = [planned('B1'), planned('B2', ['B1'])];
    const subtasksSnapshot = structuredClone(subtasks);
    replaceTaskWithSubtasks({
      tasks: before,
      originalTaskId: 'B',
      subtasks,
      reason: 'r',
      maxIterations: 3,
    });
    expect(before).toEqual(snapshot);
    expect(subtasks).toEqual(subtasksSnapshot);
  });
});

describe('replaceTaskWithSubtasks: dependency bookkeeping', () => {
  it('keeps dependents the reverse of the dependencies', () => {
    const { tasks } = replaceBInDiamond();
    expect(byId(tasks, 'A').dependents).toEqual(['B', 'C', 'B.r1.1', 'B.r1.2']);
    expect(byId(tasks, 'B').dependents).toEqual([]);
    expect(byId(tasks, 'B.r1.1').dependents).toEqual(['B.r1.2']);
    expect(byId(tasks, 'B.r1.2').dependents).toEqual(['D']);
  });

  it('counts the unsatisfied dependencies of the subtasks and of the rewired dependents', () => {
    const { tasks } = replaceBInDiamond();
    expect(byId(tasks, 'B.r1.1').pendingDependencies).toBe(0); // A is DONE
    expect(byId(tasks, 'B.r1.2').pendingDependencies).toBe(1); // waits on B1
    expect(byId(tasks, 'D').pendingDependencies).toBe(2); // waits on B2 and C
  });

  it('clears replanPending on the original', () => {
    const tasks = diamond().map((t) => (t.id === 'B' ? { ...t, replanPending: true } : t));
    expect(byId(replaceBInDiamond(tasks).tasks, 'B').replanPending).toBe(false);
  });

  it('lists the existing tasks it changed', () => {
    expect(replaceBInDiamond().changedTaskIds).toEqual(['A', 'B', 'D']);
  });
});

describe('replaceTaskWithSubtasks: the subtasks’ dependencies', () => {
  it('makes a dependent of the original depend on every sink of a fan-out', () => {
    const { tasks } = replaceTaskWithSubtasks({
      tasks: [task('A'), task('B', ['A']), task('D', ['B'])],
      originalTaskId: 'B',
      subtasks: [planned('s1'), planned('s2', ['s1']), planned('s3', ['s1'])],
      reason: 'r',
      maxIterations: 3,
    });
    expect(byId(tasks, 'D').dependencies).toEqual(['B.r1.2', 'B.r1.3']);
  });

  it('makes every subtask a sink when they do not depend on each other', () => {
    const { tasks } = replaceTaskWithSubtasks({
      tasks: [task('B'), task('D', ['B'])],
      originalTaskId: 'B',
      subtasks: [planned('s1'), planned('s2')],
      reason: 'r',
      maxIterations: 3,
    });
    expect(byId(tasks, 'D').dependencies).toEqual(['B.r1.1', 'B.r1.2']);
  });

  it('drops a subtask dependency on a task outside the replan', () => {
    const { tasks } = replaceTaskWithSubtasks({
      tasks: diamond(),
      originalTaskId: 'B',
      subtasks: [planned('B1', ['C', 'nowhere'])],
      reason: 'r',
      maxIterations: 3,
    });
    expect(byId(tasks, 'B.r1.1').dependencies).toEqual(['A']);
  });

  it('resolves a Replanner id that collides with a session id to the subtask', () => {
    const { tasks } = replaceTaskWithSubtasks({
      tasks: diamond(),
      originalTaskId: 'B',
      subtasks: [planned('C'), planned('A', ['C'])],
      reason: 'r',
      maxIterations: 3,
    });
    expect(tasks.map((t) => t.id)).toEqual(['A', 'B', 'B.r1.1', 'B.r1.2', 'C', 'D']);
    expect(byId(tasks, 'B.r1.2').dependencies).toEqual(['A', 'B.r1.1']);
    expect(byId(tasks, 'D').dependencies).toEqual(['B.r1.2', 'C']);
  });

  it('rewires every dependent of the original', () => {
    const { tasks, rewiredTaskIds } = replaceTaskWithSubtasks({
      tasks: [task('B'), task('D', ['B']), task('E', ['B', 'D'])],
      originalTaskId: 'B',
      subtasks: [planned('s')],
      reason: 'r',
      maxIterations: 3,
    });
    expect(rewiredTaskIds).toEqual(['D', 'E']);
    expect(byId(tasks, 'E').dependencies).toEqual(['B.r1.1', 'D']);
  });

  it('lets the subtasks run on the original executor unless the Replanner names one', () => {
    const { tasks } = replaceTaskWithSubtasks({
      tasks: [task('B', [], { executor: 'shell' })],
      originalTaskId: 'B',
      subtasks: [planned('s1'), planned('s2', [], { executor: 'llm' })],
      reason: 'r',
      maxIterations: 3,
    });
    expect(byId(tasks, 'B.r1.1').executor).toBe('shell');
    expect(byId(tasks, 'B.r1.2').executor).toBe('llm');
  });
});

describe('replaceTaskWithSubtasks: ids', () => {
  it('uses the idPrefix when one is given', () => {
    const { newTaskIds } = replaceTaskWithSubtasks({
      tasks: [task('B')],
      originalTaskId: 'B',
      subtasks: [planned('s1'), planned('s2')],
      reason: 'r',
      maxIterations: 3,
      idPrefix: 'fix',
    });
    expect(newTaskIds).toEqual(['fix.1', 'fix.2']);
  });

  it('keeps new ids unique when one is already taken', () => {
    const { newTaskIds } = replaceTaskWithSubtasks({
      tasks: [task('B'), task('B.r1.1')],
      originalTaskId: 'B',
      subtasks: [planned('s1'), planned('s2')],
      reason: 'r',
      maxIterations: 3,
    });
    expect(newTaskIds).toEqual(['B.r1.1_2', 'B.r1.2']);
  });

  it("keeps new ids off every task of the session, not only the original's neighbours", () => {
    // The coordinator passes the neighbourhood and the session's ids: a plan of its own may
    // hold a task named like a subtask.
    const { newTaskIds } = replaceTaskWithSubtasks({
      tasks: [task('B')],
      sessionTaskIds: ['B', 'B.r1.1', 'other'],
      originalTaskId: 'B',
      subtasks: [planned('s1'), planned('s2')],
      reason: 'r',
      maxIterations: 3,
    });
    expect(newTaskIds).toEqual(['B.r1.1_2', 'B.r1.2']);
  });

  it('produces the same ids for the same input', () => {
    expect(replaceBInDiamond()).toEqual(replaceBInDiamond());
  });
});

describe('replaceTaskWithSubtasks: two successive replans', () => {
  function replanTwice() {
    const first = replaceBInDiamond();
    const second = replaceTaskWithSubtasks({
      tasks: first.tasks,
      originalTaskId: 'B.r1.2',
      subtasks: [planned('x'), planned('y', ['x'])],
      reason: 'still too big',
      maxIterations: 3,
    });
    return { first, second };
  }

  it('increments the iteration along the chain', () => {
    const { second } = replanTwice();
    for (const id of second.newTaskIds) {
      expect(byId(second.tasks, id).replanningInfo?.iteration).toBe(2);
    }
  });

  it('keeps the root of the chain as originalTaskId', () => {
    const { second } = replanTwice();
    for (const id of second.newTaskIds) {
      expect(byId(second.tasks, id).replanningInfo?.originalTaskId).toBe('B');
    }
  });

  it('derives the new ids from the replaced subtask', () => {
    expect(replanTwice().second.newTaskIds).toEqual(['B.r1.2.r2.1', 'B.r1.2.r2.2']);
  });

  it('keeps the replaced subtask’s own iteration and root, adding what replaced it', () => {
    const replaced = byId(replanTwice().second.tasks, 'B.r1.2');
    expect(replaced.state).toBe('REPLACED_BY_REPLAN');
    expect(replaced.replanningInfo).toEqual({
      iteration: 1,
      maxIterations: 3,
      originalTaskId: 'B',
      replacedBy: ['B.r1.2.r2.1', 'B.r1.2.r2.2'],
      replanReason: 'still too big',
    });
  });

  it('passes the first subtask B1 on as a dependency of the new subtasks, and D onto the new sink', () => {
    const { second } = replanTwice();
    expect(byId(second.tasks, 'B.r1.2.r2.1').dependencies).toEqual(['A', 'B.r1.1']);
    expect(byId(second.tasks, 'B.r1.2.r2.2').dependencies).toEqual(['A', 'B.r1.1', 'B.r1.2.r2.1']);
    expect(byId(second.tasks, 'D').dependencies).toEqual(['B.r1.2.r2.2', 'C']);
  });
});

describe('replaceTaskWithSubtasks: invalid requests', () => {
  const base = { reason: 'r', maxIterations: 3 };

  it('rejects an unknown original id', () => {
    expectInvalidState(
      () =>
        replaceTaskWithSubtasks({
          ...base,
          tasks: diamond(),
          originalTaskId: 'Z',
          subtasks: [planned('s')],
        }),
      { taskId: 'Z' },
    );
  });

  it('rejects an original that is already replaced', () => {
    const { tasks } = replaceBInDiamond();
    expectInvalidState(
      () =>
        replaceTaskWithSubtasks({ ...base, tasks, originalTaskId: 'B', subtasks: [planned('s')] }),
      { taskId: 'B', state: 'REPLACED_BY_REPLAN' },
    );
  });

  it('rejects an original that is done', () => {
    expectInvalidState(
      () =>
        replaceTaskWithSubtasks({
          ...base,
          tasks: diamond(),
          originalTaskId: 'A',
          subtasks: [planned('s')],
        }),
      { taskId: 'A', state: 'DONE' },
    );
  });

  it('rejects an original that is cancelled', () => {
    expectInvalidState(
      () =>
        replaceTaskWithSubtasks({
          ...base,
          tasks: [task('B', [], { state: 'CANCELLED' })],
          originalTaskId: 'B',
          subtasks: [planned('s')],
        }),
      { taskId: 'B', state: 'CANCELLED' },
    );
  });

  it('rejects an empty subtask list', () => {
    expectInvalidState(
      () =>
        replaceTaskWithSubtasks({ ...base, tasks: diamond(), originalTaskId: 'B', subtasks: [] }),
      { taskId: 'B' },
    );
  });

  it('rejects subtasks that depend on each other in a cycle, naming the cycle', () => {
    expectInvalidState(
      () =>
        replaceTaskWithSubtasks({
          ...base,
          tasks: diamond(),
          originalTaskId: 'B',
          subtasks: [planned('p', ['r']), planned('q', ['p']), planned('r', ['q'])],
        }),
      { taskId: 'B', cycle: ['p', 'r', 'q', 'p'] },
    );
  });

  it('rejects a subtask that depends on itself', () => {
    expectInvalidState(
      () =>
        replaceTaskWithSubtasks({
          ...base,
          tasks: diamond(),
          originalTaskId: 'B',
          subtasks: [planned('p', ['p'])],
        }),
      { taskId: 'B', cycle: ['p', 'p'] },
    );
  });

  it('rejects two subtasks with the same id', () => {
    expectInvalidState(
      () =>
        replaceTaskWithSubtasks({
          ...base,
          tasks: diamond(),
          originalTaskId: 'B',
          subtasks: [planned('p'), planned('p')],
        }),
      { taskId: 'B', duplicateIds: ['p'] },
    );
  });

  it('rejects new ids that would be too long to be task ids', () => {
    const longId = 'x'.repeat(198);
    expectInvalidState(
      () =>
        replaceTaskWithSubtasks({
          ...base,
          tasks: [task(longId)],
          originalTaskId: longId,
          subtasks: [planned('s')],
        }),
      { taskId: longId },
    );
  });

  it('leaves the input untouched when it throws', () => {
    const before = diamond();
    const snapshot = structuredClone(before);
    expect(() =>
      replaceTaskWithSubtasks({
        ...base,
        tasks: before,
        originalTaskId: 'B',
        subtasks: [planned('p', ['p'])],
      }),
    ).toThrow(OrqError);
    expect(before).toEqual(snapshot);
  });
});
