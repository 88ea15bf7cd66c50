import type { Job } from 'bullmq';
import { isExecuting, type Task } from '../../shared/domain/task.js';
import type { Logger } from '../../shared/logger.js';
import type { QueueSet } from '../../shared/queue-set.js';
import type { QueueName, TaskCard } from '../../shared/queues.js';
import type { SessionStore } from '../../shared/store/session-store.js';
import type { ModelResolver } from '../models.js';

/** What every role processor gets: state to read, queues to write, models to call. */
export interface RoleContext {
  store: SessionStore;
  queues: QueueSet;
  models: ModelResolver;
  logger: Logger;
  /** How long a job's lock lasts (queues.lockDurationMs): confirmDelivery takes it that long. */
  lockDurationMs: number;
}

export { checkReply } from '../llm/check-reply.js';

/**
 * Whether a work or judge job for `attempt` is still the task's current execution. BullMQ may
 * deliver a job again after its task moved on (a stalled job whose pod was only slow): the
 * attempt alone is not enough, as a task keeps it once DONE, BLOCKED or being replanned, and
 * running it again would spend a model call and repeat the executor's side effects for a
 * result the coordinator ignores.
 */
export function isCurrentExecution(task: Task, attempt: number): boolean {
  return task.attempts === attempt && isExecuting(task);
}

/** What a role job returns when it was delivered again after handing its result on. */
export const HANDED_ON = 'handed on already';

/**
 * Whether `job`, delivered again (its process died past its hand-off, or the attempt failed
 * after it), already handed its result on as the job `next` in `queue`. Until the coordinator
 * applies that result the task or plan is still current, so running the job again would repeat
 * its model calls (uncounted: the duplicate hand-off is dropped) and an executor's side
 * effects. Only a redelivery asks Redis, so a first delivery costs nothing.
 */
export async function handedOnAlready(
  ctx: RoleContext,
  job: Job,
  queue: QueueName,
  next: string,
): Promise<boolean> {
  if (job.attemptsStarted <= 1 || !(await ctx.queues.has(queue, next))) return false;
  const { sessionId, taskId } = job.data as { sessionId?: string; taskId?: string };
  ctx.logger.info(
    { queue: job.queueName, jobId: job.id, sessionId, taskId, handedOnAs: next },
    'job delivered again after handing its result on: not run again',
  );
  return true;
}

/**
 * The task card of a task job, when it can stand for the task: it is this job's task and
 * attempt and carries the task's text. Jobs queued by older pods have none (the role reads).
 */
export function usableCard(data: {
  taskId: string;
  attempt: number;
  task?: TaskCard | undefined;
}): TaskCard | undefined {
  const card = data.task;
  return card?.id === data.taskId && card.attempt === data.attempt && card.body ? card : undefined;
}

/** The dependencies a card names without their outputs: the worker reads those. */
export function referencedDependencies(card: TaskCard): string[] {
  return card.dependencies.flatMap((d) => (d.output === undefined ? [d.taskId] : []));
}

/** A dependency's output as the card copied it, if it did. */
export function inlineOutput(card: TaskCard, taskId: string): string | undefined {
  return card.dependencies.find((d) => d.taskId === taskId)?.output;
}

/** The card with its dependencies by reference only (for a job that does not use them). */
export function withoutOutputs(card: TaskCard): TaskCard {
  return {
    ...card,
    dependencies: card.dependencies.map(({ taskId, title }) => ({ taskId, title })),
  };
}
