import { execFile, execFileSync, spawn } from 'node:child_process';
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  realpathSync,
  rmSync,
  utimesSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { lock } from 'proper-lockfile';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createCommandExecutor } from '../../src/workers/executors/command.js';
import {
  git as gitRun,
  LOCK_CONTENTION,
  openWorktree,
  taskBranchName,
} from '../../src/workers/executors/git-worktree.js';
import { lockTask, withWorktreeAdminLock } from '../../src/workers/executors/worktree-locks.js';
import { executorContext, makeSession, openStore } from '../support/executors.js';
import { git } from '../support/git.js';

const FAKE_AGENT = fileURLToPath(new URL('../fixtures/fake-coding-agent.mjs', import.meta.url));
const CHURN = fileURLToPath(new URL('../fixtures/worktree-churn.ts', import.meta.url));

/** What a churning process (worktree-churn.ts) printed last. */
interface Churned {
  opened: number;
  failures: string[];
  retries: string[];
  prunes: number;
}

let tmp: string;
let db: ReturnType<typeof openStore>;
beforeAll(() => {
  tmp = realpathSync(mkdtempSync(join(tmpdir(), 'orq-worktree-races-')));
  db = openStore();
});
afterAll(() => {
  db.close();
  rmSync(tmp, { recursive: true, force: true });
});

let repoCount = 0;
function makeRepo(): string {
  const repo = join(tmp, `repo${++repoCount}`);
  mkdirSync(repo);
  git(['init', '-q', '-b', 'main'], repo);
  git(['commit', '-q', '--allow-empty', '-m', 'initial'], repo);
  return repo;
}

const worktrees = (repo: string) =>
  git(['worktree', 'list', '--porcelain'], repo)
    .split('\n')
    .filter((l) => l.startsWith('worktree '));

describe('two deliveries of one task at once', () => {
  it('run one after the other in the task worktree instead of removing each other’s', async () => {
    const repo = makeRepo();
    const session = makeSession({
      execution: {
        defaultExecutor: 'command',
        workspaceRoot: join(tmp, 'ws'),
        // Lingers, so the second delivery starts while the first runs.
        command: {
          template: [process.execPath, FAKE_AGENT, '--linger', '1500', '{{prompt}}'],
          repository: repo,
        },
      },
    });
    const task = { id: 't1', title: 'Write the parser', acceptance: 'the parser exists' };
    const executor = createCommandExecutor();
    const results = await Promise.all([
      executor.execute(executorContext(db.store, session, task)),
      executor.execute(executorContext(db.store, session, task)),
    ]);
    for (const result of results) expect(result.error).toBeUndefined();
    expect(results.map((r) => /(created|reused) branch/.exec(r.log)?.[1]).sort()).toEqual([
      'created',
      'reused',
    ]);
    // One commit on the task branch: the second delivery of the same attempt found the first's
    // agent run committed there and did not run the agent again (docs/guarantees.md).
    const branch = taskBranchName(session.id, 't1');
    expect(git(['rev-list', '--count', `main..${branch}`], repo)).toBe('1');
    expect(results.some((r) => r.log.includes('ran in an earlier delivery'))).toBe(true);
    expect(worktrees(repo)).toHaveLength(1);
  }, 60_000);
});

describe('the worktree lock of a repository', () => {
  const lockOf = (repo: string) =>
    lock(join(repo, '.git'), {
      lockfilePath: join(repo, '.git', 'orq-worktrees.lock'),
      realpath: false,
      onCompromised: () => undefined,
    });
  const open = (repo: string, taskId: string) =>
    openWorktree({
      repository: repo,
      branch: taskBranchName('s', taskId),
      path: join(tmp, 'ws-lock', `${repo.split('/').at(-1)}-${taskId}`),
      mergeBranches: [],
    });

  it('holds back adding a worktree while another process adds, removes or prunes one', async () => {
    const repo = makeRepo();
    const release = await lockOf(repo);
    const opening = open(repo, 't1');
    try {
      // Not a timing assertion: however long it waits, nothing is added while the lock is held.
      await sleep(500);
      expect(worktrees(repo)).toHaveLength(1);
    } finally {
      await release();
    }
    const worktree = await opening;
    expect(worktrees(repo)).toHaveLength(2);
    await worktree.remove();
    expect(worktrees(repo)).toHaveLength(1);
  });

  it('of two tasks held in one process are released each by its own holder', async () => {
    const commonDir = join(makeRepo(), '.git');
    const held = () => readdirSync(join(commonDir, 'orq-task-locks'));
    const first = await lockTask(commonDir, taskBranchName('s', 'a'));
    const second = await lockTask(commonDir, taskBranchName('s', 'b'));
    expect(held()).toHaveLength(2);
    await second.release();
    expect(held()).toHaveLength(1);
    await first.release();
    expect(held()).toEqual([]);
    expect(first.lost.aborted).toBe(false);
  });

  it('is taken over once its holder died (not refreshed for 10 s)', async () => {
    const repo = makeRepo();
    const lockDir = join(repo, '.git', 'orq-worktrees.lock');
    mkdirSync(lockDir);
    const longAgo = new Date(Date.now() - 60_000);
    utimesSync(lockDir, longAgo, longAgo);
    const worktree = await open(repo, 't1');
    await worktree.remove();
    expect(existsSync(lockDir)).toBe(false);
  });
});

describe('pods sharing one repository', () => {
  // Issue 35, item 3, step by step: an add in one pod has made its entry in .git/worktrees
  // and not yet marked it (git's first step); a prune in another pod must not remove it.
  it('prune no worktree another pod is adding', async () => {
    const repo = makeRepo();
    const commonDir = join(repo, '.git');
    const adding = join(commonDir, 'worktrees', 't1');
    const pruned = await withWorktreeAdminLock(commonDir, async () => {
      mkdirSync(adding, { recursive: true });
      const pruner = spawn(process.execPath, ['--import', 'tsx', CHURN, 'prune-once', repo]);
      const exited = new Promise<void>((resolve) => pruner.once('exit', () => resolve()));
      await new Promise<void>((resolve) => pruner.stdout.once('data', () => resolve()));
      // Long enough for a prune that does not wait (one git process) to be done.
      await Promise.race([exited, sleep(3_000)]);
      expect(existsSync(adding)).toBe(true);
      // Wrapped: returning the promise itself would hold the lock until the prune ends.
      return { exited };
    });
    // Once the add is done (here: given up), the prune runs, and clears what is left of it.
    await pruned.exited;
    expect(existsSync(adding)).toBe(false);
  });

  // Issue 35, item 3. Without the worktree lock, a prune, or a remove emptying
  // .git/worktrees, lands inside another process's `git worktree add` now and then: the add
  // fails ("could not create directory of '.git/worktrees/…'") or must be tried again ("could
  // not open '.git/worktrees/…/locked'", "failed to read …/commondir"). Each process churns for
  // a fixed time, as many rounds as the machine allows; with the lock no add meets another's.
  it('open and remove worktrees at once, with a third pruning all the time, and no add meets another process’s', async () => {
    const repo = makeRepo();
    const stop = join(tmp, `stop-${repoCount}`);
    const run = async (args: string[]) => {
      const { stdout } = await promisify(execFile)(
        process.execPath,
        ['--import', 'tsx', CHURN, ...args],
        { encoding: 'utf8' },
      );
      return JSON.parse(stdout.trim().split('\n').at(-1)!) as Churned;
    };
    const pruner = run(['prune', repo, stop, '3']);
    // The same task ids in both sessions: their worktree folders share names too.
    const pods = await Promise.all(
      ['S1', 'S2'].map((session) => run(['open', repo, join(tmp, 'ws-pods'), session, '8', '2'])),
    ).finally(() => execFileSync('touch', [stop]));
    expect((await pruner).prunes).toBeGreaterThan(0);
    expect(pods.flatMap((pod) => pod.failures)).toEqual([]);
    expect(pods.flatMap((pod) => pod.retries)).toEqual([]);
    expect(worktrees(repo)).toHaveLength(1);
    const opened = pods.reduce((sum, pod) => sum + pod.opened, 0);
    expect(git(['branch', '--list', 'orq/*'], repo).split('\n')).toHaveLength(opened);
  }, 60_000);

  it('retry on the messages git prints when another process changes the worktrees', () => {
    for (const message of [
      "fatal: could not open '.git/worktrees/t3/locked' for writing: No such file or directory",
      'fatal: failed to read /repo/.git/worktrees/t3/commondir: Success',
      "fatal: Unable to create '/repo/.git/index.lock': File exists.",
      "error: cannot lock ref 'refs/heads/orq/s/t1': reference already exists",
    ]) {
      expect(LOCK_CONTENTION.test(message), message).toBe(true);
    }
    expect(LOCK_CONTENTION.test("fatal: invalid reference: 'nope'")).toBe(false);
  });
});

describe('git in a folder removed meanwhile', () => {
  it('says the folder is gone, not that git is missing', async () => {
    const gone = join(tmp, 'removed-worktree');
    await expect(gitRun(['status'], gone)).rejects.toThrow(
      `its working directory ${gone} does not exist`,
    );
    await expect(gitRun(['status'], gone)).rejects.not.toThrow('Install git');
  });
});
