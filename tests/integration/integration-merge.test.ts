import { spawn } from 'node:child_process';
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  realpathSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { fileURLToPath } from 'node:url';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { z } from 'zod';
import { IntegrationConfig } from '../../src/shared/config/schema.js';
import type { BranchToMerge } from '../../src/shared/rules/integration-plan.js';
import { taskWorkspacePath } from '../../src/workers/executors/workspace-dir.js';
import {
  integrateBranches,
  outcomeRef,
  type IntegrationRequest,
} from '../../src/workers/integration/merge.js';
import { git } from '../support/git.js';
import { eventually } from '../support/scenarios.js';

const INTEGRATE_ONCE = fileURLToPath(new URL('../fixtures/integrate-once.ts', import.meta.url));

let tmp: string;
beforeAll(() => {
  tmp = realpathSync(mkdtempSync(join(tmpdir(), 'orq-integration-')));
});
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

let count = 0;
function makeRepo(files: Record<string, string> = { 'README.md': '# project\n' }): string {
  const repo = join(tmp, `repo${++count}`);
  mkdirSync(repo);
  git(['init', '-q'], repo);
  for (const [name, text] of Object.entries(files)) writeFileSync(join(repo, name), text);
  git(['add', '-A'], repo);
  git(['commit', '-q', '-m', 'initial'], repo);
  return repo;
}

/** A task branch as the command executor leaves it: from `from`, one commit writing `files`. */
function taskBranch(
  repo: string,
  taskId: string,
  files: Record<string, string>,
  from = 'main',
): BranchToMerge {
  const branch = `orq/s1/${taskId}`;
  git(['checkout', '-q', '-b', branch, from], repo);
  for (const [name, text] of Object.entries(files)) writeFileSync(join(repo, name), text);
  git(['add', '-A'], repo);
  git(['commit', '-q', '-m', `orq: ${taskId}`], repo);
  git(['checkout', '-q', 'main'], repo);
  return {
    taskId,
    title: `Task ${taskId}`,
    branch,
    commit: git(['rev-parse', branch], repo),
    repository: repo,
  };
}

function request(
  repo: string,
  branches: BranchToMerge[],
  more: Partial<IntegrationRequest> & { integration?: z.input<typeof IntegrationConfig> } = {},
): IntegrationRequest {
  const { integration, ...rest } = more;
  return {
    sessionId: 's1',
    round: 1,
    repository: repo,
    branches,
    config: IntegrationConfig.parse(integration ?? {}),
    checks: [],
    timeoutSeconds: 60,
    maxOutputBytes: 65_536,
    workspaceRoot: join(tmp, 'ws'),
    env: { PATH: process.env.PATH },
    ...rest,
  };
}

const worktrees = (repo: string) =>
  git(['worktree', 'list', '--porcelain'], repo)
    .split('\n')
    .filter((l) => l.startsWith('worktree '));
const files = (repo: string, ref: string) => git(['ls-tree', '--name-only', ref], repo).split('\n');

describe('the integration of task branches', () => {
  it('merges independent tasks into orq/<session>/result and runs the checks there', async () => {
    const repo = makeRepo();
    const t1 = taskBranch(repo, 't1', { 'a.txt': 'a\n' });
    const t2 = taskBranch(repo, 't2', { 'b.txt': 'b\n' });
    const both = "require('fs').accessSync('a.txt'); require('fs').accessSync('b.txt')";
    const outcome = await integrateBranches(
      request(repo, [t1, t2], {
        checks: [
          { name: 'both', command: [process.execPath, '-e', both], mode: 'block' },
          { name: 'style', command: [process.execPath, '-e', 'process.exit(3)'], mode: 'warn' },
        ],
      }),
    );

    expect(outcome).toMatchObject({
      status: 'merged',
      branch: 'orq/s1/result',
      commit: git(['rev-parse', 'orq/s1/result'], repo),
      baseCommit: git(['rev-parse', 'main'], repo),
      strategy: 'merge',
      tasks: [
        { taskId: 't1', how: 'merged', commit: t1.commit },
        { taskId: 't2', how: 'merged', commit: t2.commit },
      ],
      checks: [
        { name: 'both', passed: true, exitCode: 0 },
        { name: 'style', mode: 'warn', passed: false, exitCode: 3 },
      ],
    });
    expect(outcome.diffStat).toMatch(/a\.txt.*\n.*b\.txt.*\n 2 files changed, 2 insertions/);
    expect(files(repo, 'orq/s1/result')).toEqual(['README.md', 'a.txt', 'b.txt']);
    // Merge commits with the task named, from the base.
    expect(git(['log', '--merges', '--format=%s', 'orq/s1/result'], repo).split('\n')).toEqual([
      'orq: t2: Task t2 (from orq/s1/t2)',
      'orq: t1: Task t1 (from orq/s1/t1)',
    ]);
    expect(worktrees(repo)).toHaveLength(1);
    expect(existsSync(join(tmp, 'ws', 's1'))).toBe(false);
  });

  it('squashes each task into one commit, or fast-forwards where it can', async () => {
    const repo = makeRepo();
    const t1 = taskBranch(repo, 't1', { 'a.txt': 'a\n' });
    const t2 = taskBranch(repo, 't2', { 'b.txt': 'b\n' });
    const squashed = await integrateBranches(
      request(repo, [t1, t2], { integration: { strategy: 'squash' } }),
    );
    expect(squashed.tasks.map((t) => t.how)).toEqual(['squashed', 'squashed']);
    expect(git(['log', '--format=%s %p', 'main..orq/s1/result'], repo).split('\n')).toHaveLength(2);
    expect(git(['log', '--merges', '--format=%s', 'orq/s1/result'], repo)).toBe('');

    const other = makeRepo();
    const u1 = taskBranch(other, 't1', { 'a.txt': 'a\n' });
    const u2 = taskBranch(other, 't2', { 'b.txt': 'b\n' });
    const ff = await integrateBranches(
      request(other, [u1, u2], { integration: { strategy: 'fast-forward' } }),
    );
    expect(ff.tasks.map((t) => t.how)).toEqual(['fast-forward', 'merged']);
    expect(git(['rev-parse', 'orq/s1/result^1'], other)).toBe(u1.commit);
  });

  it('takes a task whose commit a dependent already merged as contained', async () => {
    const repo = makeRepo();
    const t1 = taskBranch(repo, 't1', { 'a.txt': 'a\n' });
    const t2 = taskBranch(repo, 't2', { 'b.txt': 'b\n' }, t1.branch);
    const outcome = await integrateBranches(request(repo, [t2, t1]));
    expect(outcome.tasks.map((t) => [t.taskId, t.how])).toEqual([
      ['t2', 'merged'],
      ['t1', 'contained'],
    ]);
  });

  it('stops on two tasks that edit the same lines, naming the files and both tasks', async () => {
    const repo = makeRepo({ 'shared.txt': 'one\n' });
    const t1 = taskBranch(repo, 't1', { 'shared.txt': 'one by t1\n', 'a.txt': 'a\n' });
    const t2 = taskBranch(repo, 't2', { 'shared.txt': 'one by t2\n' });
    const outcome = await integrateBranches(request(repo, [t1, t2]));

    expect(outcome.status).toBe('conflict');
    expect(outcome.conflict).toEqual({
      files: ['shared.txt'],
      taskId: 't2',
      title: 'Task t2',
      withTaskId: 't1',
      withTitle: 'Task t1',
      hunks: expect.stringMatching(/<<<<<<< HEAD\n \+one by t1\n\+\+=======\n\+ one by t2\n/),
    });
    expect(outcome.commit).toBeUndefined();
    // Nothing half merged is left: no result branch, no worktree.
    expect(git(['branch', '--list', 'orq/s1/result'], repo)).toBe('');
    expect(worktrees(repo)).toHaveLength(1);
    // The outcome is recorded, so a later delivery reads it instead of merging again.
    expect(git(['cat-file', '-t', outcomeRef('s1', 1)], repo)).toBe('blob');
  });

  it('takes a conflicting task in through a later task that resolved it', async () => {
    const repo = makeRepo({ 'shared.txt': 'one\n' });
    const t1 = taskBranch(repo, 't1', { 'shared.txt': 'one by t1\n' });
    const t2 = taskBranch(repo, 't2', { 'shared.txt': 'one by t2\n' });
    // The resolution: t1's branch with t2 merged in and the conflict settled.
    git(['checkout', '-q', '-b', 'orq/s1/resolve', t1.branch], repo);
    expect(() => git(['merge', '-q', t2.branch], repo)).toThrow();
    writeFileSync(join(repo, 'shared.txt'), 'one by t1 and t2\n');
    git(['commit', '-q', '-am', 'resolved'], repo);
    git(['checkout', '-q', 'main'], repo);
    const resolve: BranchToMerge = {
      taskId: 'resolve',
      title: 'Resolve',
      branch: 'orq/s1/resolve',
      commit: git(['rev-parse', 'orq/s1/resolve'], repo),
      repository: repo,
    };
    const outcome = await integrateBranches(request(repo, [t1, t2, resolve]));
    expect(outcome.status).toBe('merged');
    expect(outcome.tasks.map((t) => [t.taskId, t.how, t.via])).toEqual([
      ['t1', 'merged', undefined],
      ['t2', 'contained', 'resolve'],
      ['resolve', 'merged', undefined],
    ]);
    expect(git(['show', 'orq/s1/result:shared.txt'], repo)).toBe('one by t1 and t2');
  });

  it("settles a lockfile conflict with the resolver's command", async () => {
    const repo = makeRepo({ 'package-lock.json': '{}\n', 'deps.txt': 'base\n' });
    const t1 = taskBranch(repo, 't1', { 'package-lock.json': '{"t1":1}\n', 'one.txt': 'x\n' });
    const t2 = taskBranch(repo, 't2', { 'package-lock.json': '{"t2":1}\n', 'two.txt': 'y\n' });
    // Regenerates the lockfile from the tree, as `npm install --package-lock-only` would.
    const regenerate = [
      "const fs = require('fs');",
      "const names = fs.readdirSync('.').filter((f) => f.endsWith('.txt')).sort();",
      "fs.writeFileSync('package-lock.json', JSON.stringify({ files: names }) + '\\n');",
    ].join(' ');
    const outcome = await integrateBranches(
      request(repo, [t1, t2], {
        integration: {
          resolvers: [
            { files: ['package-lock.json'], command: [process.execPath, '-e', regenerate] },
          ],
        },
      }),
    );

    expect(outcome.status).toBe('merged');
    expect(outcome.tasks.map((t) => t.how)).toEqual(['merged', 'resolved']);
    expect(outcome.resolved).toEqual([
      { files: ['package-lock.json'], command: [process.execPath, '-e', regenerate] },
    ]);
    expect(git(['show', 'orq/s1/result:package-lock.json'], repo)).toBe(
      '{"files":["deps.txt","one.txt","two.txt"]}',
    );
  });

  it('leaves a conflict in a file no resolver covers to the conflict outcome', async () => {
    const repo = makeRepo({ 'package-lock.json': '{}\n', 'shared.txt': 'one\n' });
    const t1 = taskBranch(repo, 't1', { 'package-lock.json': '{"t1":1}\n', 'shared.txt': '1\n' });
    const t2 = taskBranch(repo, 't2', { 'package-lock.json': '{"t2":1}\n', 'shared.txt': '2\n' });
    const outcome = await integrateBranches(
      request(repo, [t1, t2], {
        integration: { resolvers: [{ files: ['**/package-lock.json'], command: ['true'] }] },
      }),
    );
    expect(outcome.status).toBe('conflict');
    expect(outcome.conflict?.files).toEqual(['shared.txt']);
  });

  it('fails the outcome on a blocking check, with its output, and still writes the branch', async () => {
    const repo = makeRepo();
    const t1 = taskBranch(repo, 't1', { 'a.txt': 'a\n' });
    const failing = "console.log('2 tests failed'); process.exit(1)";
    const outcome = await integrateBranches(
      request(repo, [t1], {
        checks: [{ name: 'test', command: [process.execPath, '-e', failing], mode: 'block' }],
      }),
    );
    expect(outcome.status).toBe('checks-failed');
    expect(outcome.checks[0]).toMatchObject({ name: 'test', passed: false, exitCode: 1 });
    expect(outcome.checks[0]?.output).toContain('2 tests failed');
    expect(git(['rev-parse', 'orq/s1/result'], repo)).toBe(outcome.commit);
  });

  it('starts afresh where a delivery died half way through a merge', async () => {
    const repo = makeRepo({ 'shared.txt': 'one\n' });
    const t1 = taskBranch(repo, 't1', { 'shared.txt': 'one by t1\n' });
    const t2 = taskBranch(repo, 't2', { 'b.txt': 'b\n' });
    const bad = taskBranch(repo, 'x', { 'shared.txt': 'one by x\n' });
    // What a killed delivery leaves: its worktree, mid-merge with conflicts.
    const path = taskWorkspacePath(join(tmp, 'ws'), 's1', '@integration-1');
    git(['worktree', 'add', '--detach', path, t1.commit], repo);
    expect(() => git(['merge', bad.commit], path)).toThrow();
    expect(git(['diff', '--name-only', '--diff-filter=U'], path)).toBe('shared.txt');

    const outcome = await integrateBranches(request(repo, [t1, t2]));
    expect(outcome.status).toBe('merged');
    expect(files(repo, 'orq/s1/result')).toEqual(['b.txt', 'shared.txt']);
    expect(worktrees(repo)).toHaveLength(1);
  });

  it("keeps the other delivery's result when that one records the round first", async () => {
    const repo = makeRepo();
    const t1 = taskBranch(repo, 't1', { 'a.txt': 'a\n' });
    const t2 = taskBranch(repo, 't2', { 'b.txt': 'b\n' });
    const winner = await integrateBranches(request(repo, [t1, t2]));
    const recorded = git(['rev-parse', outcomeRef('s1', 1)], repo);
    // Taken back, to be written again by the other delivery while this one runs its check:
    // a delivery whose lock was taken over as stale (its pod paused) still gets this far.
    git(['update-ref', '-d', outcomeRef('s1', 1)], repo);
    git(['update-ref', '-d', 'refs/heads/orq/s1/result'], repo);
    const other = [
      "const { execFileSync } = require('child_process');",
      `execFileSync('git', ['update-ref', '${outcomeRef('s1', 1)}', '${recorded}'], { cwd: ${JSON.stringify(repo)} });`,
      `execFileSync('git', ['update-ref', 'refs/heads/orq/s1/result', '${winner.commit}'], { cwd: ${JSON.stringify(repo)} });`,
    ].join('\n');
    const late = await integrateBranches(
      request(repo, [t1, t2], {
        checks: [{ name: 'meanwhile', command: [process.execPath, '-e', other], mode: 'warn' }],
      }),
    );
    expect(late).toEqual(winner);
    expect(git(['rev-parse', 'orq/s1/result'], repo)).toBe(winner.commit);
  });

  it('finishes cleanly after the process merging was killed with kill -9 mid-merge', async () => {
    const repo = makeRepo({ 'package-lock.json': '{}\n' });
    const t1 = taskBranch(repo, 't1', { 'package-lock.json': '{"t1":1}\n', 'one.txt': 'x\n' });
    const t2 = taskBranch(repo, 't2', { 'package-lock.json': '{"t2":1}\n', 'two.txt': 'y\n' });
    const pidfile = join(tmp, 'resolver.pid');
    // The first delivery's resolver hangs: its process is killed in the middle of t2's merge.
    const hang = `require('fs').writeFileSync(${JSON.stringify(pidfile)}, String(process.pid)); setInterval(() => {}, 1000)`;
    const first = request(repo, [t1, t2], {
      integration: {
        resolvers: [{ files: ['package-lock.json'], command: [process.execPath, '-e', hang] }],
      },
    });
    const child = spawn(
      process.execPath,
      ['--import', 'tsx', INTEGRATE_ONCE, JSON.stringify(first)],
      {
        stdio: 'ignore',
      },
    );
    const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
    await eventually(() => existsSync(pidfile) || undefined, 'the resolver running', 30_000);
    child.kill('SIGKILL');
    process.kill(-Number(readFileSync(pidfile, 'utf8')), 'SIGKILL');
    await exited;
    // What it left: a worktree in the middle of a merge, and its lock on the round.
    const path = taskWorkspacePath(join(tmp, 'ws'), 's1', '@integration-1');
    expect(git(['rev-parse', '--verify', 'MERGE_HEAD'], path)).toBe(t2.commit);

    const retry = await integrateBranches(
      request(repo, [t1, t2], {
        integration: { resolvers: [{ files: ['package-lock.json'], command: ['true'] }] },
      }),
    );
    expect(retry.status).toBe('merged');
    expect(retry.tasks.map((t) => t.how)).toEqual(['merged', 'resolved']);
    expect(files(repo, 'orq/s1/result')).toEqual(['one.txt', 'package-lock.json', 'two.txt']);
    expect(worktrees(repo)).toHaveLength(1);
  }, 60_000);

  it('writes one result when two deliveries of the round race', async () => {
    const repo = makeRepo();
    const t1 = taskBranch(repo, 't1', { 'a.txt': 'a\n' });
    const t2 = taskBranch(repo, 't2', { 'b.txt': 'b\n' });
    // Two pods: each reads no outcome yet, so both get as far as the merge.
    const [first, second] = await Promise.all([
      integrateBranches(request(repo, [t1, t2], { workspaceRoot: join(tmp, 'pod-a') })),
      integrateBranches(request(repo, [t1, t2], { workspaceRoot: join(tmp, 'pod-b') })),
    ]);
    expect(second).toEqual(first);
    expect(git(['rev-parse', 'orq/s1/result'], repo)).toBe(first.commit);
    // One merge commit per task on the branch: the loser's merges are nowhere.
    expect(git(['rev-list', '--merges', '--count', 'orq/s1/result'], repo)).toBe('2');
    // A third delivery, later, reads the recorded round back.
    expect(await integrateBranches(request(repo, [t1, t2]))).toEqual(first);
  });

  it("moves the result branch in a later round from the earlier round's commit", async () => {
    const repo = makeRepo();
    const t1 = taskBranch(repo, 't1', { 'a.txt': 'a\n' });
    const first = await integrateBranches(request(repo, [t1]));
    // A fix task starts from the result branch, as the command executor starts it.
    const fix = taskBranch(repo, 'fix', { 'fixed.txt': 'f\n' }, 'orq/s1/result');
    const second = await integrateBranches(request(repo, [t1, fix], { round: 2 }));
    expect(second).toMatchObject({ status: 'merged', previousCommit: first.commit });
    expect(second.tasks.map((t) => [t.taskId, t.how])).toEqual([
      ['t1', 'contained'],
      ['fix', 'merged'],
    ]);
    expect(git(['rev-parse', 'orq/s1/result'], repo)).toBe(second.commit);
    expect(git(['rev-parse', `${second.commit}^1`], repo)).toBe(first.commit);
    // The diff stat stays against the base, not against round 1.
    expect(second.diffStat).toMatch(/2 files changed/);
  });

  it('fails a round whose branch was moved under it, and the retry builds on the moved branch', async () => {
    const repo = makeRepo();
    const t1 = taskBranch(repo, 't1', { 'a.txt': 'a\n' });
    await integrateBranches(request(repo, [t1]));
    const fix = taskBranch(repo, 'fix', { 'fixed.txt': 'f\n' }, 'orq/s1/result');
    // A person commits to the result branch while round 2 runs its check.
    const meanwhile = taskBranch(repo, 'person', { 'person.txt': 'p\n' }, 'orq/s1/result');
    const move = `require('child_process').execFileSync('git', ['update-ref', 'refs/heads/orq/s1/result', '${meanwhile.commit}'], { cwd: ${JSON.stringify(repo)} })`;
    const round2 = request(repo, [t1, fix], {
      round: 2,
      checks: [{ name: 'meanwhile', command: [process.execPath, '-e', move], mode: 'warn' }],
    });
    await expect(integrateBranches(round2)).rejects.toThrow(/update-ref --stdin failed/);
    // Nothing of the round was written: the person's commit stands, no outcome is recorded.
    expect(git(['rev-parse', 'orq/s1/result'], repo)).toBe(meanwhile.commit);
    expect(() => git(['rev-parse', '--verify', outcomeRef('s1', 2)], repo)).toThrow();
    const retry = await integrateBranches({ ...round2, checks: [] });
    expect(retry.previousCommit).toBe(meanwhile.commit);
    expect(files(repo, 'orq/s1/result')).toEqual(['README.md', 'a.txt', 'fixed.txt', 'person.txt']);
  });

  it('does not take over a result branch no earlier round wrote', async () => {
    const repo = makeRepo();
    const t1 = taskBranch(repo, 't1', { 'a.txt': 'a\n' });
    git(['branch', 'orq/s1/result', 'main'], repo);
    await expect(integrateBranches(request(repo, [t1], { round: 2 }))).rejects.toThrow(
      /the result branch orq\/s1\/result exists already, but no integration round of session s1 wrote it/,
    );
    expect(git(['rev-parse', 'orq/s1/result'], repo)).toBe(git(['rev-parse', 'main'], repo));
  });
});
