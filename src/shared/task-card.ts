import type { Task, TaskResult } from './domain/task.js';
import type { DependencyRef, TaskCard } from './queues.js';

/**
 * Bytes of a dependency's output copied into a work job; a longer one is referenced, and the
 * worker reads it from the store. Most outputs of a chained plan are a few hundred bytes.
 */
export const DEPENDENCY_OUTPUT_INLINE = 2048;

/**
 * Bytes (as JSON) of a task's text (acceptance, context, scope, executor) copied into its jobs,
 * and of a result copied into a replan job; longer ones are read from the store. With the
 * dependency limit, a job's data stays within a few tens of KB (typically under 2 KB).
 */
export const TASK_BODY_INLINE = 8192;

/** Dependencies whose outputs a card copies at most; the rest are referenced. */
const INLINE_DEPENDENCIES = 8;

const bytes = (text: string) => Buffer.byteLength(text, 'utf8');

/**
 * The card of `task` for a job of `attempt`, the task's version once the job's own write lands
 * being `version`. `known` holds the tasks the writer has at hand: the outputs of those among
 * the dependencies are copied when short, every other dependency is referenced.
 */
export function taskCard(
  task: Task,
  attempt: number,
  version: number,
  known: (id: string) => Task | undefined = () => undefined,
): TaskCard {
  const body = {
    acceptance: task.acceptance,
    context: task.context,
    scopePaths: task.scopePaths,
    ...(task.executor !== undefined ? { executor: task.executor } : {}),
  };
  let inlined = 0;
  const dependencies: DependencyRef[] = task.dependencies.map((id) => {
    const dep = known(id);
    const output = dep?.result?.output;
    if (
      output !== undefined &&
      inlined < INLINE_DEPENDENCIES &&
      bytes(output) <= DEPENDENCY_OUTPUT_INLINE
    ) {
      inlined += 1;
      return { taskId: id, title: dep?.title ?? id, output };
    }
    return { taskId: id, title: dep?.title ?? id };
  });
  return {
    id: task.id,
    title: task.title,
    attempt,
    version,
    ...(task.replanningInfo ? { replanningInfo: task.replanningInfo } : {}),
    ...(task.feedback !== undefined ? { feedback: task.feedback } : {}),
    ...(bytes(JSON.stringify(body)) <= TASK_BODY_INLINE ? { body } : {}),
    dependencies,
  };
}

/** A result short enough to ride in a replan job, else undefined (read from the store). */
export function inlineResult(result: TaskResult | undefined): TaskResult | undefined {
  return result && bytes(JSON.stringify(result)) <= TASK_BODY_INLINE ? result : undefined;
}

/**
 * The task a card describes, as a role acts on it while the store still holds that version:
 * undefined when the card lacks the task's text (read the task instead).
 */
export function taskFromCard(card: TaskCard, state: Task['state'] = 'RUNNING'): Task | undefined {
  if (!card.body) return undefined;
  // Built, not parsed again: the card was parsed with its job, and this is every role's hot path.
  return {
    id: card.id,
    title: card.title,
    acceptance: card.body.acceptance,
    context: card.body.context,
    scopePaths: card.body.scopePaths,
    ...(card.body.executor !== undefined ? { executor: card.body.executor } : {}),
    dependencies: card.dependencies.map((d) => d.taskId),
    state,
    attempts: card.attempt,
    continuations: 0,
    dependents: [],
    pendingDependencies: 0,
    replanPending: false,
    ...(card.replanningInfo ? { replanningInfo: card.replanningInfo } : {}),
    ...(card.feedback !== undefined ? { feedback: card.feedback } : {}),
  };
}
