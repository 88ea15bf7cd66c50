import { createHash } from 'node:crypto';
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { lock as lockType } from 'proper-lockfile';
import { OrqError } from '../../shared/errors.js';

// proper-lockfile: a lock is a folder made with mkdir (atomic on every file system, NFS too),
// its mtime refreshed while held; one whose holder died goes stale and is taken over. Loaded
// when a command task first needs it: it loads signal-exit, which re-raises SIGTERM in a
// process whose own listener was a `once` that had removed itself (orq's own are not).
const lock: typeof lockType = async (...args) => (await import('proper-lockfile')).lock(...args);

/**
 * How long a lock outlives its holder: past this without a refresh its process is taken for
 * dead (killed, or its host gone). Refreshed every half of it while held.
 */
const STALE_MS = 10_000;

/**
 * How long a delivery waits for another delivery of its task to end: one that lost its job
 * lock stops within a lock period, one whose pod died lets its lock go stale within STALE_MS.
 */
const TASK_WAIT_MS = 60_000;
const TASK_POLL_MS = 250;

function isLocked(error: unknown): boolean {
  return (error as { code?: unknown }).code === 'ELOCKED';
}

const adminQueues = new Map<string, Promise<unknown>>();

/**
 * Runs `work` holding the repository's worktree lock: `git worktree add`, `remove` and `prune`
 * of every orq process on one repository go one at a time. Run together they break each other:
 * a prune removes a worktree another process is adding before git has marked it ("could not
 * open '.git/worktrees/…/locked'"), a listing reads one half written ("failed to read
 * …/commondir"). `commonDir` is the repository's common git folder, which every process and
 * worktree of it share. Within a process the callers queue; across processes they take the
 * lock file `<commonDir>/orq-worktrees.lock`.
 */
export async function withWorktreeAdminLock<T>(
  commonDir: string,
  work: () => Promise<T>,
): Promise<T> {
  const previous = adminQueues.get(commonDir) ?? Promise.resolve();
  const next = previous.then(
    () => holdingAdminLock(commonDir, work),
    () => holdingAdminLock(commonDir, work),
  );
  const settled = next.catch(() => undefined);
  adminQueues.set(commonDir, settled);
  try {
    return await next;
  } finally {
    if (adminQueues.get(commonDir) === settled) adminQueues.delete(commonDir);
  }
}

async function holdingAdminLock<T>(commonDir: string, work: () => Promise<T>): Promise<T> {
  const release = await lock(commonDir, {
    lockfilePath: join(commonDir, 'orq-worktrees.lock'),
    realpath: false,
    stale: STALE_MS,
    // Up to about a minute: longer than a dead holder's lock takes to go stale.
    retries: { retries: 300, minTimeout: 20, maxTimeout: 200, randomize: true },
    // Found stale while held (this process stalled that long): the work is done by now or
    // soon; crashing the pod would help nobody.
    onCompromised: () => undefined,
  }).catch((error: unknown) => {
    throw new OrqError(
      'CONFLICT',
      `the worktree lock of ${commonDir} stayed taken: ${(error as Error).message}`,
      {
        hint: 'Another orq process holds it; if none runs, remove the orq-worktrees.lock folder there',
        details: { commonDir },
        cause: error,
      },
    );
  });
  try {
    return await work();
  } finally {
    await release().catch(() => undefined);
  }
}

export interface TaskLock {
  /** Aborted when the lock was lost while held (taken over as stale): stop using the worktree. */
  lost: AbortSignal;
  release(): Promise<void>;
}

/**
 * Takes the lock of one task branch of a repository, held by one delivery from before it opens
 * the task's worktree until after it removed it. A second delivery of the task (a redelivery
 * while the first still runs, on this pod or another) waits for it instead of removing its
 * worktree as a leftover; a delivery whose pod died leaves a lock that goes stale, so the
 * redelivery takes over. Waits up to TASK_WAIT_MS, then fails (retried while attempts last).
 */
export async function lockTask(
  commonDir: string,
  branch: string,
  signal?: AbortSignal,
): Promise<TaskLock> {
  const folder = join(commonDir, 'orq-task-locks');
  await mkdir(folder, { recursive: true });
  const name = join(folder, createHash('sha256').update(branch).digest('hex'));
  const lockfilePath = `${name}.lock`;
  const lost = new AbortController();
  const deadline = Date.now() + TASK_WAIT_MS;
  for (;;) {
    signal?.throwIfAborted();
    try {
      // Named for the branch, not the folder: proper-lockfile keeps a process's locks by that
      // name, and two held under one name refresh and release each other's entry (a task's
      // lock then went stale while held, or the pod died of a TypeError in its refresh).
      const release = await lock(name, {
        lockfilePath,
        realpath: false,
        stale: STALE_MS,
        onCompromised: (error) =>
          lost.abort(
            new OrqError(
              'CONFLICT',
              `the lock of task branch ${branch} was lost: ${error.message}`,
              { details: { branch } },
            ),
          ),
      });
      return { lost: lost.signal, release: () => release().catch(() => undefined) };
    } catch (error) {
      if (!isLocked(error)) throw error;
      if (Date.now() >= deadline) {
        throw new OrqError(
          'CONFLICT',
          `another delivery of task branch ${branch} still holds its worktree`,
          {
            hint: 'A job delivered again while its first run still goes on; it is retried while it has attempts left',
            details: { branch, lockfilePath },
          },
        );
      }
      await sleep(TASK_POLL_MS, undefined, signal ? { signal } : {});
    }
  }
}
