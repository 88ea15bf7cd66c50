import { TaskProgress } from './domain/progress.js';
import { isExecuting, type Task } from './domain/task.js';
import type { QueueSet } from './queue-set.js';
import { jobIds } from './queues.js';

/**
 * The progress of each executing task's current execution (RUNNING, or NEEDS_CONTINUATION:
 * a continuation runs in that state), by task id: what its work job last reported
 * (domain/progress.ts). Tasks whose executor reports none, and an older attempt's report, are
 * left out.
 */
export async function readRunningProgress(
  queues: QueueSet,
  sessionId: string,
  tasks: readonly Task[],
): Promise<Record<string, TaskProgress>> {
  const running = tasks.filter(isExecuting);
  if (running.length === 0) return {};
  const work = queues.get('work');
  const jobs = await Promise.all(
    running.map((t) => work.getJob(jobIds.execute(sessionId, t.id, t.attempts))),
  );
  const progress: Record<string, TaskProgress> = {};
  running.forEach((task, i) => {
    // A job that never reported has BullMQ's default progress, 0.
    const parsed = TaskProgress.safeParse(jobs[i]?.progress);
    if (parsed.success && parsed.data.attempt === task.attempts) progress[task.id] = parsed.data;
  });
  return progress;
}
