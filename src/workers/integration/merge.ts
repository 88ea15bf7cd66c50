import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { rm, rmdir } from 'node:fs/promises';
import { dirname, resolve } from 'node:path';
import type {
  CommandCheckConfig,
  IntegrationConfig,
  IntegrationResolverConfig,
} from '../../shared/config/schema.js';
import {
  IntegrationOutcome,
  type IntegratedTask,
  type IntegrationCheck,
  type IntegrationConflict,
} from '../../shared/domain/integration.js';
import { OrqError } from '../../shared/errors.js';
import {
  matchesPattern,
  resultBranchName,
  type BranchToMerge,
} from '../../shared/rules/integration-plan.js';
import { commonGitDir, git, gitOk } from '../executors/git-worktree.js';
import { describeOutcome, runProcess } from '../executors/process.js';
import { taskWorkspacePath } from '../executors/workspace-dir.js';
import { lockTask, withWorktreeAdminLock } from '../executors/worktree-locks.js';

/** Of a conflict's hunks, what the outcome keeps (the resolution task gets them). */
const HUNK_CHARS = 8000;
/** Of a failed check's output, what the outcome keeps (the history shows it). */
const CHECK_OUTPUT_CHARS = 4000;

/**
 * Where one integration round's outcome is recorded in the repository, as a blob: written in
 * the same ref transaction that moves the result branch, so a later delivery of the round
 * finds both or neither.
 */
export const outcomeRef = (sessionId: string, round: number) =>
  `refs/orq/${resultBranchName(sessionId)}/round-${round}`;

export interface IntegrationRequest {
  sessionId: string;
  round: number;
  repository: string;
  /** Where the result starts: execution.command.baseBranch, HEAD when unset. */
  baseRef?: string;
  branches: readonly BranchToMerge[];
  config: IntegrationConfig;
  checks: readonly CommandCheckConfig[];
  /** execution.command's: a check's default time limit and the output kept of it. */
  timeoutSeconds: number;
  maxOutputBytes: number;
  workspaceRoot: string;
  env: NodeJS.ProcessEnv;
  signal?: AbortSignal;
  /** Throws once this delivery no longer holds its job: called before each side effect. */
  confirmCurrent?: () => Promise<void>;
}

/**
 * Merges the task commits into `orq/<session>/result` and runs the checks there. The merging
 * happens in a fresh worktree on a detached HEAD; the result branch and the round's outcome
 * move together at the end, in one compare-and-swap ref transaction. A delivery that dies half
 * way leaves only a worktree the next delivery replaces; two deliveries racing write one
 * outcome, and the other reads it back. A round already recorded is read back, not redone.
 */
export async function integrateBranches(asked: IntegrationRequest): Promise<IntegrationOutcome> {
  let request = asked;
  const repository = resolve(request.repository);
  const recorded = await readOutcome(repository, request.sessionId, request.round);
  if (recorded) return recorded;
  const commonDir = await commonGitDir(repository);
  const branch = resultBranchName(request.sessionId);
  // One delivery of the round at a time on this repository; a dead one's lock goes stale.
  const lock = await lockTask(commonDir, branch, request.signal);
  // A delivery whose lock was taken over as stale (its process stalled) stops; were it past
  // its last check already, the ref transaction still lets only one outcome in.
  const signal = request.signal ? AbortSignal.any([request.signal, lock.lost]) : lock.lost;
  request = { ...request, signal };
  try {
    const earlier = await readOutcome(repository, request.sessionId, request.round);
    if (earlier) return earlier;
    await request.confirmCurrent?.();
    const path = taskWorkspacePath(
      request.workspaceRoot,
      request.sessionId,
      `@integration-${request.round}`,
    );
    const base = await gitOk(
      ['rev-parse', '--verify', `${request.baseRef ?? 'HEAD'}^{commit}`],
      repository,
    );
    const previous = await previousResult(repository, request.sessionId, request.round);
    await withWorktreeAdminLock(commonDir, async () => {
      // A worktree a dead delivery left is replaced whole: its half-done merge goes with it.
      await dropWorktree(repository, path);
      await gitOk(['worktree', 'add', '--detach', path, previous ?? base], repository);
    });
    try {
      const merged = await mergeAndCheck(request, repository, path, base);
      const outcome = previous ? { ...merged, previousCommit: previous } : merged;
      const parsed = IntegrationOutcome.parse(outcome);
      await request.confirmCurrent?.();
      return await recordOutcome(repository, request, parsed);
    } finally {
      await withWorktreeAdminLock(commonDir, () => dropWorktree(repository, path));
      await rmdir(dirname(path)).catch(() => undefined);
    }
  } finally {
    await lock.release();
  }
}

/** Run holding the worktree lock: removes the worktree at `path`, if any, and prunes. */
async function dropWorktree(repository: string, path: string): Promise<void> {
  if (existsSync(path)) await git(['worktree', 'remove', '--force', path], repository);
  await rm(path, { recursive: true, force: true });
  await git(['worktree', 'prune'], repository);
}

async function mergeAndCheck(
  request: IntegrationRequest,
  repository: string,
  path: string,
  base: string,
): Promise<IntegrationOutcome> {
  const { strategy } = request.config;
  const tasks: IntegratedTask[] = [];
  const resolved: IntegrationOutcome['resolved'] = [];
  const outcomeBase = {
    repository,
    branch: resultBranchName(request.sessionId),
    baseCommit: base,
    strategy,
    tasks,
    resolved,
  };
  for (const next of request.branches) {
    request.signal?.throwIfAborted();
    const entry = {
      taskId: next.taskId,
      title: next.title,
      branch: next.branch,
      commit: next.commit,
    };
    if ((await git(['merge-base', '--is-ancestor', next.commit, 'HEAD'], path)).code === 0) {
      tasks.push({ ...entry, how: 'contained' });
      continue;
    }
    const message = `orq: ${next.taskId}: ${next.title} (from ${next.branch})`;
    const args =
      strategy === 'squash'
        ? ['merge', '--squash', next.commit]
        : [
            'merge',
            strategy === 'merge' ? '--no-ff' : '--ff',
            '--no-edit',
            '--no-verify',
            '-m',
            message,
            next.commit,
          ];
    const merged = await git(args, path, request.signal);
    let how: IntegratedTask['how'] = strategy === 'squash' ? 'squashed' : 'merged';
    if (merged.code !== 0) {
      const files = await unmergedFiles(path);
      if (files.length === 0) {
        throw new OrqError(
          'INVALID_STATE',
          `git merge of ${next.branch} failed: ${merged.stderr.trim() || merged.stdout.trim()}`,
          { details: { repository, taskId: next.taskId, commit: next.commit } },
        );
      }
      const settled = await settleConflicts(request, path, files);
      const later =
        'uncovered' in settled ? await laterHolding(path, next, request.branches) : undefined;
      if (later) {
        // A later task merged this one's branch (a dependent, or the task that resolved this
        // conflict): its merge brings this task in, resolved.
        await git(['reset', '-q', '--hard', 'HEAD'], path);
        tasks.push({ ...entry, how: 'contained', via: later.taskId });
        continue;
      }
      if ('uncovered' in settled) {
        const conflict = await describeConflict(path, base, tasks, next, settled.uncovered);
        return { ...outcomeBase, status: 'conflict', diffStat: '', checks: [], conflict };
      }
      resolved.push(...settled.ran);
      how = 'resolved';
    }
    if (strategy === 'squash' || how === 'resolved') {
      // A squash, or a merge whose conflicts a resolver settled, is committed here.
      if ((await git(['diff', '--cached', '--quiet'], path)).code === 0 && strategy === 'squash') {
        tasks.push({ ...entry, how: 'contained' });
        continue;
      }
      const commit =
        strategy === 'squash'
          ? ['commit', '-q', '--no-verify', '-m', message]
          : ['commit', '-q', '--no-verify', '--no-edit'];
      await gitOk(commit, path);
    } else if (
      strategy === 'fast-forward' &&
      (await gitOk(['rev-parse', 'HEAD'], path)) === next.commit
    ) {
      how = 'fast-forward';
    }
    tasks.push({ ...entry, how });
  }
  const head = await gitOk(['rev-parse', 'HEAD'], path);
  const diffStat = (await git(['diff', '--stat', base, head], path)).stdout.trim();
  const checks = await runChecks(request, path);
  const blocking = checks.some((c) => !c.passed && c.mode !== 'warn');
  return {
    ...outcomeBase,
    status: blocking ? 'checks-failed' : 'merged',
    commit: head,
    diffStat,
    checks,
  };
}

/** The first task after `next` whose commit holds `next`'s. */
async function laterHolding(
  path: string,
  next: BranchToMerge,
  branches: readonly BranchToMerge[],
): Promise<BranchToMerge | undefined> {
  for (const later of branches.slice(branches.indexOf(next) + 1)) {
    if ((await git(['merge-base', '--is-ancestor', next.commit, later.commit], path)).code === 0)
      return later;
  }
  return undefined;
}

async function unmergedFiles(path: string): Promise<string[]> {
  const out = await gitOk(['diff', '--name-only', '--diff-filter=U', '-z'], path);
  return out.split('\0').filter(Boolean);
}

/**
 * Settles the conflicted files with the resolvers that cover them: each file is set to the
 * result so far, then the resolver's command regenerates it from the merged tree. Any file no
 * resolver covers (or a resolver that fails) is left to the caller as a conflict.
 */
async function settleConflicts(
  request: IntegrationRequest,
  path: string,
  files: readonly string[],
): Promise<{ ran: IntegrationOutcome['resolved'] } | { uncovered: string[] }> {
  const resolverOf = (file: string): IntegrationResolverConfig | undefined =>
    request.config.resolvers.find((r) => r.files.some((p) => matchesPattern(file, p)));
  const uncovered = files.filter((f) => !resolverOf(f));
  if (uncovered.length > 0) return { uncovered };
  const ran: IntegrationOutcome['resolved'] = [];
  for (const resolver of request.config.resolvers) {
    const mine = files.filter((f) => resolverOf(f) === resolver);
    if (mine.length === 0) continue;
    await gitOk(['checkout', '--ours', '--', ...mine], path);
    await request.confirmCurrent?.();
    const outcome = await runInTree(request, path, resolver.command, resolver.timeoutSeconds);
    if (outcome.exitCode !== 0) return { uncovered: mine };
    ran.push({ files: mine, command: resolver.command });
  }
  await gitOk(['add', '-A'], path);
  const left = await unmergedFiles(path);
  return left.length > 0 ? { uncovered: left } : { ran };
}

/** The conflict: its files, the task being merged, and the merged task that changed them last. */
async function describeConflict(
  path: string,
  base: string,
  merged: readonly IntegratedTask[],
  next: BranchToMerge,
  files: string[],
): Promise<IntegrationConflict> {
  const diff = (await git(['diff'], path, undefined, HUNK_CHARS * 4)).stdout;
  const hunks = diff.length > HUNK_CHARS ? `${diff.slice(0, HUNK_CHARS)}\n[... cut ...]` : diff;
  await git(['merge', '--abort'], path);
  for (const earlier of [...merged].reverse()) {
    const changed = (await git(['diff', '--name-only', '-z', base, earlier.commit], path)).stdout
      .split('\0')
      .filter(Boolean);
    if (files.some((f) => changed.includes(f))) {
      return {
        files,
        taskId: next.taskId,
        title: next.title,
        withTaskId: earlier.taskId,
        withTitle: earlier.title,
        hunks,
      };
    }
  }
  return { files, taskId: next.taskId, title: next.title, hunks };
}

async function runChecks(request: IntegrationRequest, path: string): Promise<IntegrationCheck[]> {
  const checks: IntegrationCheck[] = [];
  for (const check of request.checks) {
    await request.confirmCurrent?.();
    const timeoutSeconds = check.timeoutSeconds ?? request.timeoutSeconds;
    const outcome = await runInTree(request, path, check.command, timeoutSeconds);
    const passed = outcome.exitCode === 0;
    const output = outcome.output.slice(-CHECK_OUTPUT_CHARS);
    checks.push({
      name: check.name,
      mode: check.mode,
      passed,
      exitCode: outcome.exitCode,
      ...(passed
        ? {}
        : { output: `${describeOutcome(outcome, timeoutSeconds * 1000)}\n${output}`.trim() }),
    });
  }
  return checks;
}

/**
 * Where a later round starts: the result branch as it is now, when an earlier round of the
 * session wrote it (a fix round builds on the result the final judge saw, and on any commit a
 * person added to it since). Undefined when there is none yet. A branch of that name no earlier
 * round wrote is someone else's, and is not taken over.
 */
async function previousResult(
  repository: string,
  sessionId: string,
  round: number,
): Promise<string | undefined> {
  const branch = resultBranchName(sessionId);
  const tip = await git(
    ['rev-parse', '--verify', '--quiet', `refs/heads/${branch}^{commit}`],
    repository,
  );
  if (tip.code !== 0) return undefined;
  for (let earlier = round - 1; earlier >= 1; earlier -= 1) {
    if ((await readOutcome(repository, sessionId, earlier))?.commit) return tip.stdout.trim();
  }
  throw new OrqError(
    'INVALID_STATE',
    `the result branch ${branch} exists already, but no integration round of session ${sessionId} wrote it`,
    {
      hint: `Rename or delete that branch (git branch -m ${branch} <other>), then resume the session`,
      details: { repository, branch, round },
    },
  );
}

/**
 * The session's result branch when one of its integration rounds wrote it (a recorded outcome
 * with a commit), else undefined: what a task that runs after that round builds on.
 */
export async function writtenResultBranch(
  repository: string,
  sessionId: string,
): Promise<string | undefined> {
  const branch = resultBranchName(sessionId);
  const tip = await git(['rev-parse', '--verify', '--quiet', `refs/heads/${branch}`], repository);
  if (tip.code !== 0) return undefined;
  const listed = await git(
    ['for-each-ref', '--format=%(refname)', `refs/orq/${branch}/`],
    repository,
  );
  for (const ref of listed.stdout.split('\n')) {
    const round = /\/round-(\d+)$/.exec(ref.trim())?.[1];
    if (round && (await readOutcome(repository, sessionId, Number(round)))?.commit) return branch;
  }
  return undefined;
}

/** The round's recorded outcome, if a delivery recorded one. */
async function readOutcome(
  repository: string,
  sessionId: string,
  round: number,
): Promise<IntegrationOutcome | undefined> {
  const blob = await git(['cat-file', 'blob', outcomeRef(sessionId, round)], repository);
  if (blob.code !== 0) return undefined;
  return IntegrationOutcome.parse(JSON.parse(blob.stdout));
}

/**
 * Writes the outcome as a blob and, in one ref transaction, creates the round's outcome ref and
 * (when there is a commit) creates the result branch, or moves it from the commit the round
 * started from (compare-and-swap: a branch moved since, by a person or another round, fails the
 * whole transaction, and a retry starts again from where it is now). A delivery that loses the
 * race reads the winner's outcome back.
 */
async function recordOutcome(
  repository: string,
  request: IntegrationRequest,
  outcome: IntegrationOutcome,
): Promise<IntegrationOutcome> {
  const blob = (
    await gitInput(['hash-object', '-w', '--stdin'], repository, JSON.stringify(outcome))
  ).trim();
  const lines = [`create ${outcomeRef(request.sessionId, request.round)} ${blob}`];
  if (outcome.commit) {
    lines.push(
      outcome.previousCommit
        ? `update refs/heads/${outcome.branch} ${outcome.commit} ${outcome.previousCommit}`
        : `create refs/heads/${outcome.branch} ${outcome.commit}`,
    );
  }
  try {
    await gitInput(['update-ref', '--stdin'], repository, `${lines.join('\n')}\n`);
  } catch (error) {
    const winner = await readOutcome(repository, request.sessionId, request.round);
    if (winner) return winner;
    throw error;
  }
  return outcome;
}

/** git with `input` on its stdin; its stdout, or an OrqError with its stderr. */
function gitInput(args: readonly string[], cwd: string, input: string): Promise<string> {
  return new Promise((resolvePromise, reject) => {
    const child = spawn('git', [...args], {
      cwd,
      env: { ...process.env, GIT_TERMINAL_PROMPT: '0' },
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString('utf8')));
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString('utf8')));
    child.on('error', reject);
    child.on('close', (code) => {
      if (code === 0) resolvePromise(stdout);
      else {
        reject(
          new OrqError('INVALID_STATE', `git ${args.join(' ')} failed: ${stderr.trim()}`, {
            details: { cwd, args, exitCode: code },
          }),
        );
      }
    });
    child.stdin.end(input);
  });
}

/**
 * Runs a resolver or a check in the merged tree, with the request's output bound, environment
 * and signal; a cancel of the session ends it and throws.
 */
async function runInTree(
  request: IntegrationRequest,
  path: string,
  command: readonly string[],
  timeoutSeconds: number,
) {
  const outcome = await runProcess(command, {
    cwd: path,
    timeoutMs: timeoutSeconds * 1000,
    maxOutputBytes: request.maxOutputBytes,
    env: request.env,
    ...(request.signal ? { signal: request.signal } : {}),
  });
  request.signal?.throwIfAborted();
  return outcome;
}
