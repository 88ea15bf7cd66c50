import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { rm, rmdir, stat, writeFile } from 'node:fs/promises';
import { homedir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { OrqError, ValidationError } from '../../shared/errors.js';
import { distinctName } from './distinct-name.js';
import {
  fallbackGlobalConfig,
  fallbackIdentityEnv,
  globalConfigPaths,
  identityHint,
  IDENTITY_KEYS,
  makesCommits,
  parseConfigLines,
} from './git-identity.js';
import { lockTask, withWorktreeAdminLock } from './worktree-locks.js';

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
 * A command that makes commits gets orq's fallback identity where git has none (git-identity.ts).
 */
export async function git(
  args: readonly string[],
  cwd: string,
  signal?: AbortSignal,
  maxBytes = DEFAULT_MAX_BYTES,
): Promise<GitResult> {
  const identity = makesCommits(args) ? await fallbackIdentity(cwd, signal) : {};
  return runGit(args, cwd, identity, signal, maxBytes);
}

/**
 * What a coding agent run in the worktree at `cwd` gets in its environment so that its own
 * commits have an identity where git has none (a pod's bare HOME): GIT_CONFIG_GLOBAL naming a
 * config with orq's fallback identity that includes the real global config
 * (fallbackGlobalConfig), written in the worktree's own git directory, which goes with the
 * worktree. Nothing where the config or the environment names an identity.
 */
export async function agentIdentityEnv(
  cwd: string,
  signal?: AbortSignal,
): Promise<Record<string, string>> {
  if (Object.keys(await fallbackIdentity(cwd, signal)).length === 0) return {};
  const gitDir = resolve(cwd, await gitOk(['rev-parse', '--git-dir'], cwd, signal));
  const path = join(gitDir, 'orq-agent-global.gitconfig');
  await writeFile(path, fallbackGlobalConfig(globalConfigPaths(process.env, homedir())));
  return { GIT_CONFIG_GLOBAL: path };
}

/**
 * The variables that give a commit made in `cwd` orq's fallback identity: none where the
 * repository's config (global and system included) or the environment names one.
 */
async function fallbackIdentity(
  cwd: string,
  signal?: AbortSignal,
): Promise<Record<string, string>> {
  const config = await runGit(['config', '--get-regexp', IDENTITY_KEYS], cwd, {}, signal);
  // Exit 1: no such key is set.
  return fallbackIdentityEnv(config.code === 0 ? parseConfigLines(config.stdout) : {}, process.env);
}

function runGit(
  args: readonly string[],
  cwd: string,
  extraEnv: Record<string, string>,
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
        env: { ...process.env, GIT_TERMINAL_PROMPT: '0', GIT_EDITOR: 'true', ...extraEnv },
        ...(signal ? { signal } : {}),
      },
      (error, stdout, stderr) => {
        const code = (error as { code?: unknown } | null)?.code;
        if (code === 'ERR_CHILD_PROCESS_STDIO_MAXBUFFER') {
          resolve({ code: 0, stdout, stderr, truncated: true });
          return;
        }
        if (error && typeof code !== 'number') {
          reject(cannotRun(args, cwd, error, code));
          return;
        }
        resolve({ code: error ? Number(code) : 0, stdout, stderr });
      },
    );
  });
}

/**
 * Why git could not start. ENOENT is git missing from PATH, or the folder it was to run in
 * gone (spawn says the same for both): removed while the task ran, by a cleanup or by hand.
 */
function cannotRun(args: readonly string[], cwd: string, error: Error, code: unknown): OrqError {
  const options = { details: { cwd, args }, cause: error };
  if (code === 'ENOENT' && !existsSync(cwd)) {
    return new OrqError(
      'INVALID_STATE',
      `git ${args[0] ?? ''} could not run: its working directory ${cwd} does not exist`,
      { ...options, hint: 'It was removed while the task ran (by hand, or by a cleanup)' },
    );
  }
  return new OrqError('INVALID_STATE', `git ${args[0] ?? ''} could not run: ${error.message}`, {
    ...options,
    ...(code === 'ENOENT' ? { hint: 'Install git and put it on PATH' } : {}),
  });
}

/**
 * What git prints when another process holds one of its locks or is adding or removing a
 * worktree of the same repository (orq's own serialize, other git users may not): worth a retry.
 */
export const LOCK_CONTENTION = new RegExp(
  [
    String.raw`\.lock\b`,
    'Unable to create',
    'cannot lock ref',
    String.raw`could not open '[^']*/worktrees/[^']*'`,
    String.raw`failed to read .*/(commondir|gitdir)`,
  ].join('|'),
  'i',
);

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
    const hint = identityHint(result.stderr);
    throw new OrqError(
      'INVALID_STATE',
      `git ${args.join(' ')} failed: ${result.stderr.trim() || result.stdout.trim()}`,
      { details: { cwd, args, exitCode: result.code }, ...(hint ? { hint } : {}) },
    );
  }
  return result.stdout.trim();
}

/**
 * A ref-safe branch name, one per task: `orq/<session id>/<task id>`. The whole session id,
 * because sessions share a repository and a prefix of it can repeat. Task ids git refuses in a
 * ref (`..`, a leading or trailing `.`, a `.lock` end) are made safe and get a hash of the
 * original, so `a..b` and `a_b` stay two branches. A task named `result` would take the
 * session's result branch (`orq/<session>/result`): its branch is `result-task-<hash>`.
 */
export function taskBranchName(sessionId: string, taskId: string): string {
  const safe = taskId
    .replace(/\.{2,}/g, '_')
    .replace(/^\./, '_')
    .replace(/\.lock$/, '_lock')
    .replace(/\.$/, '_')
    .replace(/^result$/, 'result-task');
  return `orq/${sessionId}/${distinctName(taskId, safe)}`;
}

export async function branchExists(repository: string, branch: string): Promise<boolean> {
  return (
    (await git(['rev-parse', '--verify', '--quiet', `refs/heads/${branch}`], repository)).code === 0
  );
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
  /**
   * Aborted when this delivery lost the task's lock while it ran (this process stalled past
   * its expiry and another delivery took the task over): it must stop using the worktree.
   */
  lost: AbortSignal;
  /** Removes the worktree (its commits stay in the branch) and releases the task's lock. */
  remove(): Promise<void>;
  /**
   * Releases the task's lock and leaves the worktree as it is: for a delivery that lost its job,
   * whose new delivery may work in the worktree now.
   */
  leave(): Promise<void>;
}

export interface OpenWorktreeOptions {
  repository: string;
  branch: string;
  path: string;
  /** Where a new branch starts; HEAD of the repository when unset. */
  baseRef?: string;
  /** Branches merged in when they exist (the task's dependencies' branches). */
  mergeBranches: readonly string[];
  /** The execution attempt: its start is kept in refs/orq/<branch>/attempt-<n>. */
  attempt?: number;
  signal?: AbortSignal;
  /**
   * Runs holding the task's lock, before the worktree is opened: where what an earlier delivery
   * that died left behind (its agent) is cleared, sure that no delivery runs now.
   */
  beforeOpen?: () => Promise<void>;
}

async function pathExists(path: string): Promise<boolean> {
  return stat(path).then(
    () => true,
    () => false,
  );
}

/**
 * Forgets worktrees whose folders are gone. Run holding the worktree lock only: a prune beside
 * another process's `git worktree add` can remove the worktree that add is making.
 */
const pruneHeld = (repository: string) => git(['worktree', 'prune'], repository);

/** Run holding the worktree lock (withWorktreeAdminLock). */
async function removeWorktree(repository: string, path: string): Promise<void> {
  await git(['worktree', 'remove', '--force', path], repository);
  await rm(path, { recursive: true, force: true });
  await pruneHeld(repository);
}

/** `git worktree prune` taking the repository's worktree lock. */
export async function pruneWorktrees(repository: string): Promise<void> {
  const commonDir = await commonGitDir(repository);
  await withWorktreeAdminLock(commonDir, () => pruneHeld(repository));
}

/**
 * The repository's common git folder (shared by its worktrees): where orq's locks of it live.
 * Refuses a folder that is not a repository, or one without a commit, permanently.
 */
export async function commonGitDir(repository: string): Promise<string> {
  const dir = await git(['rev-parse', '--git-common-dir'], repository);
  if (dir.code !== 0) {
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
  return resolve(repository, dir.stdout.trim());
}

/**
 * Adds the worktree on the task branch, creating the branch from `baseRef` when it does not
 * exist. Looked at on each try: an add that failed on contention may have made the branch.
 */
async function addWorktree(
  options: OpenWorktreeOptions,
  notes: string[],
  tries = 5,
): Promise<void> {
  const { repository, branch, path, signal } = options;
  for (let retry = 0; ; retry++) {
    if (retry > 0) await new Promise((r) => setTimeout(r, 100 * retry));
    // A failed add can leave its folder behind, which the next add refuses.
    if (await pathExists(path)) await removeWorktree(repository, path);
    let result: GitResult;
    let note: string;
    if (await branchExists(repository, branch)) {
      result = await git(['worktree', 'add', path, branch], repository, signal);
      note = `reused branch ${branch}`;
    } else {
      const base = await gitOk(
        ['rev-parse', '--verify', `${options.baseRef ?? 'HEAD'}^{commit}`],
        repository,
        signal,
      );
      result = await git(['worktree', 'add', '-b', branch, path, base], repository, signal);
      note = `created branch ${branch} from ${options.baseRef ?? 'HEAD'} (${base.slice(0, 12)})`;
    }
    if (result.code === 0) {
      notes.push(note);
      return;
    }
    if (retry + 1 >= tries || !LOCK_CONTENTION.test(result.stderr)) {
      throw new OrqError('INVALID_STATE', `git worktree add failed: ${result.stderr.trim()}`, {
        details: { repository, path, branch, exitCode: result.code },
      });
    }
    // Said in the task's log: another process (not orq's, which take the worktree lock) changed
    // the repository's worktrees, or held one of git's locks, while this add ran.
    notes.push(`git worktree add tried again after: ${result.stderr.trim().split('\n').at(-1)}`);
  }
}

/**
 * A worktree of `repository` at `path` on the task's own branch: created from the base on the
 * first run, reused (with its earlier commits) on continuations and redeliveries. The
 * branches of the task's dependencies are merged in so it builds on their work; a conflicting
 * merge is left out and noted.
 */
export async function openWorktree(options: OpenWorktreeOptions): Promise<Worktree> {
  const { repository, branch, path, signal } = options;
  const commonDir = await commonGitDir(repository);
  // Held until the worktree is removed: a second delivery of the task waits for this one.
  const taskLock = await lockTask(commonDir, branch, signal);
  const notes: string[] = [];
  const remove = async () => {
    try {
      await withWorktreeAdminLock(commonDir, () => removeWorktree(repository, path));
    } finally {
      await taskLock.release();
    }
    // The session's folder goes with its last worktree (rmdir leaves a folder in use).
    await rmdir(dirname(path)).catch(() => undefined);
  };
  try {
    await options.beforeOpen?.();
    // Task branches start from a commit: what is not committed in the repository is not in them.
    const uncommitted = await git(['status', '--porcelain', '--untracked-files=no'], repository);
    if (uncommitted.code === 0 && uncommitted.stdout.trim() !== '') {
      notes.push(
        `note: ${repository} has uncommitted changes; task branches start from commits and do not include them`,
      );
    }
    await withWorktreeAdminLock(commonDir, async () => {
      // Safe under the lock: no orq process is half way through adding one.
      await pruneHeld(repository);
      // A worktree left by a delivery that died is replaced (the task lock says none runs);
      // its commits live on in the branch.
      await addWorktree(options, notes);
    });
  } catch (error) {
    await remove();
    throw error;
  }
  try {
    for (const other of options.mergeBranches) {
      if (!(await branchExists(repository, other))) continue;
      const merged = await git(
        ['merge', '--no-edit', '--no-verify', '-m', `orq: merge ${other} into ${branch}`, other],
        path,
        signal,
      );
      if (merged.code === 0) notes.push(`merged ${other}`);
      else {
        await git(['merge', '--abort'], path);
        // Not a conflict: every merge would fail the same way, and leaving them out is wrong.
        const hint = identityHint(merged.stderr);
        if (hint) {
          throw new OrqError(
            'INVALID_STATE',
            `git merge ${other} failed: ${merged.stderr.trim().split('\n').at(-1) ?? ''}`,
            {
              hint,
              details: { path, branch, other },
            },
          );
        }
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
      lost: taskLock.lost,
      remove,
      leave: () => taskLock.release(),
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
export async function commitAll(worktree: string, message: string): Promise<string | undefined> {
  await gitOk(['add', '-A'], worktree);
  if ((await git(['diff', '--cached', '--quiet'], worktree)).code === 0) return undefined;
  await gitOk(['commit', '-q', '--no-verify', '-m', message], worktree);
  return gitOk(['rev-parse', 'HEAD'], worktree);
}

/** An empty commit recording the run, so every task ends with a commit of its own. */
export async function commitEmpty(worktree: string, message: string): Promise<string> {
  await gitOk(['commit', '-q', '--no-verify', '--allow-empty', '-m', message], worktree);
  return gitOk(['rev-parse', 'HEAD'], worktree);
}
