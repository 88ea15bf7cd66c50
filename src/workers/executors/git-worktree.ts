import { execFile } from 'node:child_process';
import { rm, rmdir, stat } from 'node:fs/promises';
import { dirname } from 'node:path';
import { OrqError, ValidationError } from '../../shared/errors.js';
import { distinctName } from './distinct-name.js';

export interface GitResult {
  code: number;
  stdout: string;
  stderr: string;
  /** stdout stopped at `maxBytes` and git was stopped: what is there is the head of it. */
  truncated?: boolean;
}

const DEFAULT_MAX_BYTES = 64 * 1024 * 1024;

/**
 * Runs git without a shell; a non-zero exit is returned, not thrown. Output past `maxBytes`
 * stops git and is left out (`truncated`): a diff of a 70 MB file must not fail the task.
 */
export function git(
  args: readonly string[],
  cwd: string,
  signal?: AbortSignal,
  maxBytes = DEFAULT_MAX_BYTES,
): Promise<GitResult> {
  return new Promise((resolve, reject) => {
    execFile(
      'git',
      [...args],
      {
        cwd,
        maxBuffer: maxBytes,
        // Never wait for a password prompt or an editor.
        env: { ...process.env, GIT_TERMINAL_PROMPT: '0', GIT_EDITOR: 'true' },
        ...(signal ? { signal } : {}),
      },
      (error, stdout, stderr) => {
        const code = (error as { code?: unknown } | null)?.code;
        if (code === 'ERR_CHILD_PROCESS_STDIO_MAXBUFFER') {
          resolve({ code: 0, stdout, stderr, truncated: true });
          return;
        }
        if (error && typeof code !== 'number') {
          reject(
            new OrqError('INVALID_STATE', `git ${args[0] ?? ''} could not run: ${error.message}`, {
              ...(code === 'ENOENT' ? { hint: 'Install git and put it on PATH' } : {}),
              details: { cwd, args },
              cause: error,
            }),
          );
          return;
        }
        resolve({ code: error ? Number(code) : 0, stdout, stderr });
      },
    );
  });
}

const LOCK_CONTENTION = /\.lock|Unable to create|cannot lock ref/i;

/** git that must succeed; retried a few times when another process holds one of git's locks. */
export async function gitOk(
  args: readonly string[],
  cwd: string,
  signal?: AbortSignal,
): Promise<string> {
  let result = await git(args, cwd, signal);
  for (
    let retry = 1;
    result.code !== 0 && retry <= 5 && LOCK_CONTENTION.test(result.stderr);
    retry++
  ) {
    await new Promise((r) => setTimeout(r, 100 * retry));
    result = await git(args, cwd, signal);
  }
  if (result.code !== 0) {
    throw new OrqError(
      'INVALID_STATE',
      `git ${args.join(' ')} failed: ${result.stderr.trim() || result.stdout.trim()}`,
      {
        details: { cwd, args, exitCode: result.code },
      },
    );
  }
  return result.stdout.trim();
}

// Worktree and branch changes of one repository go one at a time within a process; git's own
// lock files (with the retries above) order them across processes.
const repoLocks = new Map<string, Promise<unknown>>();
async function withRepoLock<T>(repository: string, work: () => Promise<T>): Promise<T> {
  const previous = repoLocks.get(repository) ?? Promise.resolve();
  const next = previous.then(work, work);
  const settled = next.catch(() => undefined);
  repoLocks.set(repository, settled);
  try {
    return await next;
  } finally {
    if (repoLocks.get(repository) === settled) repoLocks.delete(repository);
  }
}

/**
 * A ref-safe branch name, one per task: `orq/<session id>/<task id>`. The whole session id,
 * because sessions share a repository and a prefix of it can repeat. Task ids git refuses in a
 * ref (`..`, a leading or trailing `.`, a `.lock` end) are made safe and get a hash of the
 * original, so `a..b` and `a_b` stay two branches.
 */
export function taskBranchName(sessionId: string, taskId: string): string {
  const safe = taskId
    .replace(/\.{2,}/g, '_')
    .replace(/^\./, '_')
    .replace(/\.lock$/, '_lock')
    .replace(/\.$/, '_');
  return `orq/${sessionId}/${distinctName(taskId, safe)}`;
}

export async function branchExists(repository: string, branch: string): Promise<boolean> {
  return (
    (await git(['rev-parse', '--verify', '--quiet', `refs/heads/${branch}`], repository)).code === 0
  );
}

/**
 * `-c user.name/-c user.email` when the repository has no identity configured, so orq's own
 * commits work on a bare machine; a configured identity is left alone.
 */
export async function commitIdentity(repository: string): Promise<string[]> {
  const email = await git(['config', '--get', 'user.email'], repository);
  const name = await git(['config', '--get', 'user.name'], repository);
  return [
    ...(name.code === 0 && name.stdout.trim() ? [] : ['-c', 'user.name=orq']),
    ...(email.code === 0 && email.stdout.trim() ? [] : ['-c', 'user.email=orq@localhost']),
  ];
}

export interface Worktree {
  path: string;
  branch: string;
  /**
   * Where this attempt began (after merging dependencies): HEAD when the attempt first opened
   * the worktree, kept across a redelivery of the same attempt, so the diff shows the commits
   * a crashed delivery made too. The attempt's diff base.
   */
  startCommit: string;
  /** What happened while opening it: branch created or reused, merges. */
  notes: string[];
  remove(): Promise<void>;
}

export interface OpenWorktreeOptions {
  repository: string;
  branch: string;
  path: string;
  /** Where a new branch starts; HEAD of the repository when unset. */
  baseRef?: string;
  /** Branches merged in when they exist (the task's dependencies' branches). */
  mergeBranches: readonly string[];
  identity: readonly string[];
  /** The execution attempt: its start is kept in refs/orq/<branch>/attempt-<n>. */
  attempt?: number;
  signal?: AbortSignal;
}

async function pathExists(path: string): Promise<boolean> {
  return stat(path).then(
    () => true,
    () => false,
  );
}

async function removeWorktree(repository: string, path: string): Promise<void> {
  await git(['worktree', 'remove', '--force', path], repository);
  await rm(path, { recursive: true, force: true });
  await git(['worktree', 'prune'], repository);
}

/**
 * A worktree of `repository` at `path` on the task's own branch: created from the base on the
 * first run, reused (with its earlier commits) on continuations and redeliveries. The
 * branches of the task's dependencies are merged in so it builds on their work; a conflicting
 * merge is left out and noted.
 */
export async function openWorktree(options: OpenWorktreeOptions): Promise<Worktree> {
  const { repository, branch, path, signal } = options;
  if ((await git(['rev-parse', '--git-dir'], repository)).code !== 0) {
    // Permanent (a ValidationError): retrying cannot turn the folder into a repository.
    throw new ValidationError(
      'command executor configuration',
      [{ path: 'execution.command.repository', message: `${repository} is not a git repository` }],
      {
        hint: 'Point it at a git repository with at least one commit',
        details: { repository },
      },
    );
  }
  if ((await git(['rev-parse', '--verify', '--quiet', 'HEAD^{commit}'], repository)).code !== 0) {
    // Permanent too: task branches start from a commit, and there is none to start from.
    throw new ValidationError(
      'command executor configuration',
      [{ path: 'execution.command.repository', message: `${repository} has no commit yet` }],
      {
        hint: 'Make a first commit in it (git commit --allow-empty -m init will do)',
        details: { repository },
      },
    );
  }
  const notes: string[] = [];
  const remove = () =>
    withRepoLock(repository, async () => {
      await removeWorktree(repository, path);
      // The session's folder goes with its last worktree (rmdir leaves a folder in use).
      await rmdir(dirname(path)).catch(() => undefined);
    });
  // Task branches start from a commit: what is not committed in the repository is not in them.
  const uncommitted = await git(['status', '--porcelain', '--untracked-files=no'], repository);
  if (uncommitted.code === 0 && uncommitted.stdout.trim() !== '') {
    notes.push(
      `note: ${repository} has uncommitted changes; task branches start from commits and do not include them`,
    );
  }
  await withRepoLock(repository, async () => {
    await git(['worktree', 'prune'], repository);
    // A worktree left by a run that crashed is replaced; its commits live on in the branch.
    if (await pathExists(path)) await removeWorktree(repository, path);
    if (await branchExists(repository, branch)) {
      await gitOk(['worktree', 'add', path, branch], repository, signal);
      notes.push(`reused branch ${branch}`);
    } else {
      const base = await gitOk(
        ['rev-parse', '--verify', `${options.baseRef ?? 'HEAD'}^{commit}`],
        repository,
        signal,
      );
      await gitOk(['worktree', 'add', '-b', branch, path, base], repository, signal);
      notes.push(
        `created branch ${branch} from ${options.baseRef ?? 'HEAD'} (${base.slice(0, 12)})`,
      );
    }
  });
  try {
    for (const other of options.mergeBranches) {
      if (!(await branchExists(repository, other))) continue;
      const merged = await git(
        [
          ...options.identity,
          'merge',
          '--no-edit',
          '--no-verify',
          '-m',
          `orq: merge ${other} into ${branch}`,
          other,
        ],
        path,
        signal,
      );
      if (merged.code === 0) notes.push(`merged ${other}`);
      else {
        await git(['merge', '--abort'], path);
        notes.push(
          `could not merge ${other} (conflict); left out: ${merged.stdout.trim().split('\n').at(-1) ?? ''}`,
        );
      }
    }
    const head = await gitOk(['rev-parse', 'HEAD'], path, signal);
    const startCommit =
      options.attempt === undefined
        ? head
        : await attemptStart(repository, branch, options.attempt, head, notes);
    return {
      path,
      branch,
      startCommit,
      notes,
      remove,
    };
  } catch (error) {
    await remove();
    throw error;
  }
}

/**
 * The commit an attempt started from: recorded under refs/orq/ the first time the attempt
 * opens its worktree, read back when the same attempt runs again (a redelivered job).
 */
async function attemptStart(
  repository: string,
  branch: string,
  attempt: number,
  head: string,
  notes: string[],
): Promise<string> {
  const ref = `refs/orq/${branch}/attempt-${attempt}`;
  const recorded = await git(['rev-parse', '--verify', '--quiet', `${ref}^{commit}`], repository);
  if (recorded.code === 0 && recorded.stdout.trim()) {
    const start = recorded.stdout.trim();
    if (start !== head)
      notes.push(`attempt ${attempt} ran before: diff from its start ${start.slice(0, 12)}`);
    return start;
  }
  await gitOk(['update-ref', ref, head], repository);
  return head;
}

/** Commits every change in the worktree; returns the new commit, or undefined when clean. */
export async function commitAll(
  worktree: string,
  message: string,
  identity: readonly string[],
): Promise<string | undefined> {
  await gitOk(['add', '-A'], worktree);
  if ((await git(['diff', '--cached', '--quiet'], worktree)).code === 0) return undefined;
  await gitOk([...identity, 'commit', '-q', '--no-verify', '-m', message], worktree);
  return gitOk(['rev-parse', 'HEAD'], worktree);
}

/** An empty commit recording the run, so every task ends with a commit of its own. */
export async function commitEmpty(
  worktree: string,
  message: string,
  identity: readonly string[],
): Promise<string> {
  await gitOk(
    [...identity, 'commit', '-q', '--no-verify', '--allow-empty', '-m', message],
    worktree,
  );
  return gitOk(['rev-parse', 'HEAD'], worktree);
}
