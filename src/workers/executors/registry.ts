import type { Session } from '../../shared/domain/session.js';
import type { Task } from '../../shared/domain/task.js';
import { ValidationError } from '../../shared/errors.js';
import { createAgentExecutor, type AgentModelFactory } from './agent/executor.js';
import { createCommandExecutor } from './command.js';
import { createLlmExecutor } from './llm.js';
import type { Executor } from './types.js';

export interface ExecutorRegistry {
  /** The executor for a task: its own `executor`, else the session's execution.defaultExecutor. */
  resolve(task: Task, session: Session): Executor;
  readonly names: readonly string[];
}

export interface ExecutorRegistryOptions {
  /** The agent executor's model (default: from the session's worker llm config). */
  agentModel?: AgentModelFactory;
  /** More executors, or replacements of the built-in ones by name. */
  executors?: readonly Executor[];
}

/** The built-in executors (llm, agent, command) plus any given, by name. */
export function createExecutorRegistry(options: ExecutorRegistryOptions = {}): ExecutorRegistry {
  const byName = new Map<string, Executor>();
  for (const executor of [
    createLlmExecutor(),
    createAgentExecutor(options.agentModel ? { model: options.agentModel } : {}),
    createCommandExecutor(),
    ...(options.executors ?? []),
  ]) {
    byName.set(executor.name, executor);
  }
  const names = [...byName.keys()];
  return {
    names,
    resolve(task, session) {
      const name = task.executor ?? session.config.execution.defaultExecutor;
      const executor = byName.get(name);
      if (executor) return executor;
      // Permanent: no retry can make an unknown executor known, so the task fails at once.
      throw new ValidationError(
        'executor choice',
        [
          {
            path: task.executor ? `task ${task.id}: executor` : 'execution.defaultExecutor',
            message: `unknown executor "${name}"`,
          },
        ],
        {
          hint: `Use one of ${names.join(', ')}`,
          details: { sessionId: session.id, taskId: task.id, executor: name },
        },
      );
    },
  };
}
