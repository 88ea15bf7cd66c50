import { TaskProgress } from './domain/progress.js';
import { isExecuting, type Task } from './domain/task.js';
import type { QueueSet } from './queue-set.js';
import { jobIds } from './queues.js';

/** What the work jobs of a session's executing tasks say about them. */
export interface RunningJobs {
  /**
   * The progress of each executing task's current execution (RUNNING, or NEEDS_CONTINUATION:
   * a continuation runs in that state), by task id: what its work job last reported
   * (domain/progress.ts). Tasks whose executor reports none, and an older attempt's report,
   * are left out.
   */
  progress: Record<string, TaskProgress>;
  /**
   * Executing tasks whose current work job no worker has taken yet, in task order: the
   * coordinator marks a task RUNNING when it queues the job, so with every worker busy (or
   * none running) most RUNNING tasks of a wide session are only waiting.
   */
  queued: string[];
}

/** Reads the current work job of each executing task (one HGETALL each, sent together). */
export async function readRunningJobs(
  queues: QueueSet,
  sessionId: string,
  tasks: readonly Task[],
): Promise<RunningJobs> {
  const running = tasks.filter(isExecuting);
  if (running.length === 0) return { progress: {}, queued: [] };
  const work = queues.get('work');
  const jobs = await Promise.all(
    running.map((t) =>
      work.getJob(
        t.resumedAfter?.attempt === t.attempts
          ? jobIds.resumeExecute(sessionId, t.id, t.attempts, t.resumedAfter.waitId)
          : jobIds.execute(sessionId, t.id, t.attempts),
      ),
    ),
  );
  const progress: Record<string, TaskProgress> = {};
  const queued: string[] = [];
  running.forEach((task, i) => {
    const job = jobs[i];
    // BullMQ stamps processedOn when a worker takes the job; a retry keeps the earlier stamp.
    if (job && job.processedOn === undefined) queued.push(task.id);
    // A job that never reported has BullMQ's default progress, 0.
    const parsed = TaskProgress.safeParse(job?.progress);
    if (parsed.success && parsed.data.attempt === task.attempts) progress[task.id] = parsed.data;
  });
  return { progress, queued };
}
