import { describe, expect, it } from 'vitest';
import { ExecutionConfig } from '../../src/shared/config/schema.js';
import {
  enforceExecutorPolicy,
  executorAllowed,
  refusedExecutorsReason,
  type ExecutorPolicy,
} from '../../src/shared/rules/executor-choice.js';

const defaults = ExecutionConfig.parse({});
const policy = (taskExecutors: string[] = [], defaultExecutor = 'llm'): ExecutorPolicy => ({
  defaultExecutor,
  taskExecutors,
});

describe('executor choice of planned tasks', () => {
  it('lets no task choose by default: only the default executor is allowed', () => {
    expect(defaults.taskExecutors).toEqual([]);
    expect(executorAllowed('llm', defaults)).toBe(true);
    for (const name of ['agent', 'command', 'shell']) {
      expect(executorAllowed(name, defaults), name).toBe(false);
    }
  });

  it('allows the listed executors and the default one, nothing else', () => {
    const p = policy(['agent'], 'command');
    expect(executorAllowed('agent', p)).toBe(true);
    expect(executorAllowed('command', p)).toBe(true);
    expect(executorAllowed('llm', p)).toBe(false);
    // Names are compared exactly.
    expect(executorAllowed('Agent', p)).toBe(false);
  });

  it('takes refused choices out, keeps allowed ones and tasks that name none, in order', () => {
    const tasks = [
      { id: 't1', title: 'a' },
      { id: 't2', title: 'b', executor: 'agent' },
      { id: 't3', title: 'c', executor: 'command' },
      { id: 't4', title: 'd', executor: 'llm' },
    ];
    const { tasks: kept, refused } = enforceExecutorPolicy(tasks, policy(['agent']));
    expect(kept).toEqual([
      { id: 't1', title: 'a' },
      { id: 't2', title: 'b', executor: 'agent' },
      { id: 't3', title: 'c' },
      { id: 't4', title: 'd', executor: 'llm' },
    ]);
    expect('executor' in kept[2]!).toBe(false);
    expect(refused).toEqual([{ taskId: 't3', executor: 'command' }]);
    // The input is not changed.
    expect(tasks[2]).toEqual({ id: 't3', title: 'c', executor: 'command' });
  });

  it('refuses nothing when every choice is allowed, and returns equal tasks', () => {
    const tasks = [{ id: 't1', executor: 'agent' }, { id: 't2' }];
    expect(enforceExecutorPolicy(tasks, policy(['agent']))).toEqual({ tasks, refused: [] });
    expect(enforceExecutorPolicy([], policy())).toEqual({ tasks: [], refused: [] });
  });

  it('names the choices, the rule and where the tasks run in its reason', () => {
    const refused = [
      { taskId: 't2', executor: 'agent' },
      { taskId: 't3', executor: 'command' },
    ];
    expect(refusedExecutorsReason(refused, policy())).toBe(
      't2 named "agent", t3 named "command", but tasks may not choose an executor ' +
        '(execution.taskExecutors is empty); they run on "llm" (execution.defaultExecutor)',
    );
    expect(refusedExecutorsReason(refused.slice(1), policy(['agent', 'x']))).toBe(
      't3 named "command", but tasks may choose only agent, x (execution.taskExecutors); ' +
        'they run on "llm" (execution.defaultExecutor)',
    );
    expect(refusedExecutorsReason(refused.slice(0, 1), policy(), '"command", as t1 did')).toMatch(
      /they run on "command", as t1 did$/,
    );
  });
});
