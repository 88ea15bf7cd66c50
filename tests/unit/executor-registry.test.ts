import { describe, expect, it } from 'vitest';
import { SessionConfig } from '../../src/shared/config/schema.js';
import { Session } from '../../src/shared/domain/session.js';
import { Task } from '../../src/shared/domain/task.js';
import { ValidationError } from '../../src/shared/errors.js';
import { createExecutorRegistry } from '../../src/workers/executors/registry.js';
import type { Executor } from '../../src/workers/executors/types.js';

const session = (defaultExecutor?: string) =>
  Session.parse({
    id: 's1',
    instruction: 'x',
    state: 'RUNNING',
    createdAt: '',
    updatedAt: '',
    requiredTerms: { terms: [], source: 'user-input' },
    config: SessionConfig.parse(defaultExecutor ? { execution: { defaultExecutor } } : {}),
    planning: {},
  });
const task = (executor?: string) =>
  Task.parse({ id: 't1', title: 'T', acceptance: 'A', ...(executor ? { executor } : {}) });

describe('the executor registry', () => {
  const registry = createExecutorRegistry();

  it('knows llm, agent and command', () => {
    expect(registry.names).toEqual(['llm', 'agent', 'command']);
  });

  it('uses llm when neither the task nor the session names one', () => {
    expect(registry.resolve(task(), session()).name).toBe('llm');
  });

  it("uses the session's execution.defaultExecutor", () => {
    expect(registry.resolve(task(), session('command')).name).toBe('command');
  });

  it("lets the task's own executor win over the session default", () => {
    expect(registry.resolve(task('agent'), session('command')).name).toBe('agent');
  });

  it('refuses an unknown name with a ValidationError naming the key and the known executors', () => {
    expect(() => registry.resolve(task(), session('shell'))).toThrow(ValidationError);
    expect(() => registry.resolve(task(), session('shell'))).toThrow(
      /execution\.defaultExecutor: unknown executor "shell".*llm, agent, command/,
    );
    expect(() => registry.resolve(task('magic'), session())).toThrow(/task t1: executor/);
  });

  it('takes more executors, and replacements by name', () => {
    const custom: Executor = { name: 'llm', execute: async () => ({ output: 'custom' }) as never };
    const extra: Executor = { name: 'shell', execute: async () => ({ output: 'x' }) as never };
    const withMore = createExecutorRegistry({ executors: [custom, extra] });
    expect(withMore.resolve(task(), session())).toBe(custom);
    expect(withMore.resolve(task(), session('shell'))).toBe(extra);
  });
});
