import { describe, expect, it } from 'vitest';
import { Task } from '../../src/shared/domain/task.js';
import { jobKind, taskJobName } from '../../src/shared/queues.js';
import {
  DEPENDENCY_OUTPUT_INLINE,
  inlineResult,
  TASK_BODY_INLINE,
  taskCard,
  taskFromCard,
} from '../../src/shared/task-card.js';

const done = (id: string, output: string) =>
  Task.parse({
    id,
    title: `Task ${id}`,
    acceptance: 'ok',
    state: 'DONE',
    result: { output },
  });

describe('a task card', () => {
  const task = Task.parse({
    id: 't4',
    title: 'Write parser',
    acceptance: 'parses',
    context: 'grammar in docs',
    dependencies: ['short', 'long', 'elsewhere'],
    state: 'RUNNING',
    attempts: 2,
    feedback: 'handle comments',
    replanningInfo: {
      iteration: 1,
      maxIterations: 3,
      originalTaskId: 't1',
      replanReason: 'too big',
    },
  });
  const known = new Map([
    ['short', done('short', 'tokens')],
    ['long', done('long', 'x'.repeat(DEPENDENCY_OUTPUT_INLINE + 1))],
  ]);

  it('copies short dependency outputs and references long or unknown ones', () => {
    const card = taskCard(task, 2, 9, (id) => known.get(id));
    expect(card.dependencies).toEqual([
      { taskId: 'short', title: 'Task short', output: 'tokens' },
      { taskId: 'long', title: 'Task long' },
      { taskId: 'elsewhere', title: 'elsewhere' },
    ]);
    expect(card).toMatchObject({
      id: 't4',
      attempt: 2,
      version: 9,
      feedback: 'handle comments',
      replanningInfo: { iteration: 1, originalTaskId: 't1', replanReason: 'too big' },
    });
  });

  it('stands for the task it was made of', () => {
    const again = taskFromCard(taskCard(task, 2, 9));
    expect(again).toMatchObject({
      id: 't4',
      acceptance: 'parses',
      context: 'grammar in docs',
      dependencies: ['short', 'long', 'elsewhere'],
      attempts: 2,
      feedback: 'handle comments',
      replanningInfo: task.replanningInfo,
    });
  });

  it("leaves a long task's text and a long result to the store", () => {
    const long = { ...task, context: 'c'.repeat(TASK_BODY_INLINE) };
    const card = taskCard(long, 2, 9);
    expect(card.body).toBeUndefined();
    expect(taskFromCard(card)).toBeUndefined();
    const result = done('r', 'y'.repeat(TASK_BODY_INLINE)).result;
    expect(inlineResult(result)).toBeUndefined();
    expect(inlineResult(done('r', 'short').result)).toEqual(done('r', 'short').result);
  });
});

describe('task job names', () => {
  it('name the task and attempt and route on their first word', () => {
    const name = taskJobName('execute', { id: 't4', title: 'Write parser', attempt: 2 });
    expect(name).toBe('execute t4 "Write parser" #2');
    expect(jobKind(name)).toBe('execute');
    expect(jobKind('judge-task')).toBe('judge-task');
    const long = taskJobName('judge-task', { id: 'x', title: 'w'.repeat(500), attempt: 1 });
    expect(long.length).toBeLessThan(100);
  });
});
