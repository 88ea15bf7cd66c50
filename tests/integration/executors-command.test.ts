import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  realpathSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { z } from 'zod';
import type { CommandExecutorConfig } from '../../src/shared/config/schema.js';
import type { ProgressUpdate } from '../../src/shared/domain/progress.js';
import { OrqError, ValidationError } from '../../src/shared/errors.js';
import {
  agentRecordPath,
  processStart,
  recordAgent,
} from '../../src/workers/executors/agent-record.js';
import { createCommandExecutor } from '../../src/workers/executors/command.js';
import { git as gitRun, taskBranchName } from '../../src/workers/executors/git-worktree.js';
import { clusterPerTest, type TestCluster } from '../support/cluster.js';
import { bullQueue } from '../support/pods.js';
import { formatSessionTable } from '../../src/producers/cli/format.js';
import { jobIds } from '../../src/shared/queues.js';
import { executorContext, makeSession, openStore } from '../support/executors.js';
import { git, makeRepo } from '../support/git.js';
import { eventually } from '../support/scenarios.js';
import { taskWorkspacePath } from '../../src/workers/executors/workspace-dir.js';

const FAKE_AGENT = fileURLToPath(new URL('../fixtures/fake-coding-agent.mjs', import.meta.url));
const CHECK_FIXED = fileURLToPath(new URL('../fixtures/check-fixed.mjs', import.meta.url));

let tmp: string;
let db: ReturnType<typeof openStore>;
beforeAll(() => {
  tmp = realpathSync(mkdtempSync(join(tmpdir(), 'orq-command-')));
  db = openStore();
});
afterAll(() => {
  db.close();
  rmSync(tmp, { recursive: true, force: true });
});

const task = { id: 't1', title: 'Write the parser', acceptance: 'the parser exists' };

function setup(
  command: Partial<z.input<typeof CommandExecutorConfig>> = {},
  agentArgs: string[] = [],
) {
  const repo = makeRepo(tmp);
  const session = makeSession({
    execution: {
      defaultExecutor: 'command',
      workspaceRoot: join(tmp, 'ws'),
      command: {
        template: [process.execPath, FAKE_AGENT, ...agentArgs, '{{prompt}}'],
        repository: repo,
        ...command,
      },
    },
  });
  return { repo, session, branch: taskBranchName(session.id, 't1') };
}

const killGroup = (pid: number) => {
  try {
    process.kill(-pid, 'SIGKILL');
  } catch {
    // Gone already.
  }
};

const worktrees = (repo: string) =>
  git(['worktree', 'list', '--porcelain'], repo)
    .split('\n')
    .filter((l) => l.startsWith('worktree '));

describe('the command executor', () => {
  it('runs the agent in a worktree on its own branch and commits what it left', async () => {
    const { repo, session, branch } = setup();
    const result = await createCommandExecutor().execute(executorContext(db.store, session, task));

    expect(result.error).toBeUndefined();
    expect(git(['show', `${branch}:t1.txt`], repo)).toBe('t1: Write the parser');
    expect(git(['log', '-1', '--format=%s', branch], repo)).toBe(
      'orq: t1 attempt 1: Write the parser',
    );
    expect(git(['rev-list', '--count', `main..${branch}`], repo)).toBe('1');
    const meta = result.artifacts.find((a) => a.kind === 'git')?.meta;
    expect(meta).toMatchObject({ branch, commit: git(['rev-parse', branch], repo), exitCode: 0 });
    expect(meta?.diffStat).toMatch(/t1\.txt \| 1 \+\n 1 file changed, 1 insertion/);
    expect(result.output).toMatch(
      /^Agent exit code 0 on branch orq\/.+\/t1, commit [0-9a-f]{12}: 1 file changed/,
    );
    expect(result.output).toContain('fake agent edited t1.txt for task t1');
    expect(result.log).toContain('+t1: Write the parser');
    expect(worktrees(repo)).toHaveLength(1);
    expect(git(['status', '--porcelain'], repo)).toBe('');
  });

  it('reports what the agent and the checks are doing as progress while they run', async () => {
    const { session } = setup(
      {
        checks: [
          {
            name: 'slow',
            command: [
              process.execPath,
              '-e',
              'console.log("checking"); setTimeout(() => {}, 2500)',
            ],
          },
        ],
      },
      ['--linger', '2600'],
    );
    const updates: ProgressUpdate[] = [];
    const result = await createCommandExecutor().execute(
      executorContext(db.store, session, task, { progress: (u) => updates.push(u) }),
    );
    expect(result.error).toBeUndefined();
    const agent = updates.findIndex((u) => u.activity === 'agent started');
    const check = updates.findIndex((u) => u.activity === 'check slow started');
    expect(agent).toBe(0);
    expect(check).toBeGreaterThan(agent);
    // Every 2 s while the command printed more: its output so far and its last line. Each
    // command prints for longer than that, so each is reported at least once.
    const agentOutput = updates.slice(agent + 1, check);
    expect(agentOutput.length).toBeGreaterThan(0);
    for (const update of agentOutput) {
      expect(update.activity).toMatch(
        /^agent: \d+B of output; last: fake agent(: still working \(\d+\)| edited t1\.txt for task t1)$/,
      );
      expect(update.outputBytes).toBeGreaterThan(0);
    }
    const checkOutput = updates.slice(check + 1);
    expect(checkOutput.length).toBeGreaterThan(0);
    for (const update of checkOutput) {
      expect(update).toEqual({
        activity: 'check slow: 9B of output; last: checking',
        outputBytes: 9,
      });
    }
  });

  it('leaves no folder of the session behind once its worktree is removed', async () => {
    const { session } = setup();
    const result = await createCommandExecutor().execute(executorContext(db.store, session, task));
    expect(result.error).toBeUndefined();
    expect(existsSync(join(tmp, 'ws', session.id))).toBe(false);
    expect(existsSync(join(tmp, 'ws'))).toBe(true);
  });

  it('says that uncommitted changes in the repository are not in the task branch', async () => {
    const { repo, session, branch } = setup();
    writeFileSync(join(repo, 'README.md'), '# project\nwork in progress\n');
    const result = await createCommandExecutor().execute(executorContext(db.store, session, task));
    expect(result.log).toContain(
      `note: ${repo} has uncommitted changes; task branches start from commits and do not include them`,
    );
    expect(git(['show', `${branch}:README.md`], repo)).toBe('# project');
    // A clean repository gets no such note.
    const clean = setup();
    const other = await createCommandExecutor().execute(
      executorContext(db.store, clean.session, task),
    );
    expect(other.log).not.toContain('uncommitted changes');
  });

  describe('an agent left running by a delivery whose pod was killed', () => {
    const spawned: ChildProcess[] = [];
    afterAll(() => {
      for (const child of spawned) if (child.pid) killGroup(child.pid);
    });
    /** A process group of its own that runs until killed, as a coding agent would. */
    const leftover = () => {
      const child = spawn(process.execPath, ['-e', 'setInterval(() => {}, 1000)'], {
        detached: true,
        stdio: 'ignore',
      });
      spawned.push(child);
      return child.pid!;
    };
    const recordFor = (session: { id: string }) => {
      const path = taskWorkspacePath(join(tmp, 'ws'), session.id, 't1');
      mkdirSync(dirname(path), { recursive: true });
      return agentRecordPath(path);
    };

    it('is stopped before the worktree is opened again, and said so in the log', async () => {
      const { session } = setup();
      const pid = leftover();
      const record = recordFor(session);
      recordAgent(record, pid);
      expect(processStart(pid)).toBeDefined();
      const result = await createCommandExecutor().execute(
        executorContext(db.store, session, task, { attempt: 1 }),
      );
      expect(result.error).toBeUndefined();
      expect(result.log).toContain(
        `stopped the agent an earlier delivery left running (process group ${pid})`,
      );
      expect(processStart(pid)).toBeUndefined();
      expect(existsSync(record)).toBe(false);
    });

    it('is not a process that only has its pid: a record of another start kills nothing', async () => {
      const { session } = setup();
      const pid = leftover();
      const record = recordFor(session);
      writeFileSync(record, JSON.stringify({ pid, start: '1' }));
      const result = await createCommandExecutor().execute(
        executorContext(db.store, session, task),
      );
      expect(result.log).not.toContain('stopped the agent');
      expect(processStart(pid)).toBeDefined();
      expect(existsSync(record)).toBe(false);
    });

    it('is recorded while it runs, and the record goes when it ends', async () => {
      const { session } = setup({ timeoutSeconds: 1 }, ['--hang']);
      const record = recordFor(session);
      const running = createCommandExecutor().execute(executorContext(db.store, session, task));
      const seen = await eventually(
        () =>
          existsSync(record)
            ? (JSON.parse(readFileSync(record, 'utf8')) as { pid: number })
            : undefined,
        'the agent to be recorded',
      );
      expect(processStart(seen.pid)).toBeDefined();
      await running;
      expect(existsSync(record)).toBe(false);
    });
  });

  it('keeps the commits of an agent that commits its own work', async () => {
    const { repo, session, branch } = setup({}, ['--commit']);
    const result = await createCommandExecutor().execute(executorContext(db.store, session, task));
    expect(result.error).toBeUndefined();
    expect(git(['log', '-1', '--format=%an|%s', branch], repo)).toBe('Fake Agent|fake agent: t1');
    expect(git(['rev-list', '--count', `main..${branch}`], repo)).toBe('1');
  });

  it('continues on the same branch in the next execution attempt', async () => {
    const { repo, session, branch } = setup();
    const executor = createCommandExecutor();
    await executor.execute(executorContext(db.store, session, task, { attempt: 1 }));
    const second = await executor.execute(
      executorContext(db.store, session, task, { attempt: 2, feedback: 'add more' }),
    );
    expect(second.log).toContain(`reused branch ${branch}`);
    expect(git(['show', `${branch}:t1.txt`], repo)).toBe(
      't1: Write the parser\nt1: Write the parser',
    );
    expect(git(['rev-list', '--count', `main..${branch}`], repo)).toBe('2');
  });

  it('a redelivered attempt diffs from where the attempt began, the first delivery included', async () => {
    const { repo, session, branch } = setup({}, ['--commit']);
    const executor = createCommandExecutor();
    const first = await executor.execute(executorContext(db.store, session, task, { attempt: 1 }));
    // The same attempt again, as after a worker crash: its first commit is already on the branch,
    // but the crash came before the run was recorded as finished, so the agent runs again.
    git(['update-ref', '-d', `refs/orq/${branch}/agent-run-1-1`], repo);
    const again = await executor.execute(executorContext(db.store, session, task, { attempt: 1 }));
    const base = (r: typeof first) => r.artifacts.find((a) => a.kind === 'git')?.meta?.baseCommit;
    expect(base(again)).toBe(base(first));
    expect(git(['rev-list', '--count', `main..${branch}`], repo)).toBe('2');
    expect(again.log).toContain(`attempt 1 ran before: diff from its start`);
    // Both deliveries' lines are in the diff the judge reads.
    expect(again.log.match(/^\+t1: Write the parser$/gm)).toHaveLength(2);
    // The next attempt starts from where the last one ended.
    const next = await executor.execute(executorContext(db.store, session, task, { attempt: 2 }));
    expect(base(next)).toBe(git(['rev-parse', `${branch}~1`], repo));
  });

  it('a redelivered attempt whose agent run ended and was committed does not run the agent again', async () => {
    const { repo, session, branch } = setup();
    const executor = createCommandExecutor();
    const first = await executor.execute(executorContext(db.store, session, task, { attempt: 1 }));
    // The same attempt again, as after a pod paused past its lock: the first delivery's result
    // was lost, its work was not.
    const again = await executor.execute(executorContext(db.store, session, task, { attempt: 1 }));
    expect(again.error).toBeUndefined();
    expect(again.log).toMatch(
      /agent round 1 ran in an earlier delivery of attempt 1 \(commit [0-9a-f]{12}, exit code 0\): not run again/,
    );
    expect(git(['show', `${branch}:t1.txt`], repo)).toBe('t1: Write the parser');
    expect(git(['rev-list', '--count', `main..${branch}`], repo)).toBe('1');
    const commit = (r: typeof first) => r.artifacts.find((a) => a.kind === 'git')?.meta?.commit;
    expect(commit(again)).toBe(commit(first));
    expect(again.output).toContain('fake agent edited t1.txt for task t1');
    // The next attempt runs the agent.
    await executor.execute(executorContext(db.store, session, task, { attempt: 2 }));
    expect(git(['rev-list', '--count', `main..${branch}`], repo)).toBe('2');
  });

  describe('with no git identity anywhere, as in a pod', () => {
    const identityOf = (repo: string, rev: string) =>
      git(['log', '-1', '--format=%an <%ae>|%cn <%ce>', rev], repo);
    const ORQ = 'orq <orq@localhost>|orq <orq@localhost>';

    it("commits the agent's work as orq <orq@localhost>, and records its run", async () => {
      const { repo, session, branch } = setup();
      // Neither the repository nor a global or system config (tests/support/bare-git.ts) nor
      // the environment names an identity.
      expect((await gitRun(['config', '--get-regexp', String.raw`^user\.`], repo)).code).toBe(1);
      expect(process.env.GIT_AUTHOR_NAME ?? process.env.EMAIL).toBeUndefined();
      const executor = createCommandExecutor();
      const result = await executor.execute(executorContext(db.store, session, task));
      expect(result.error).toBeUndefined();
      expect(identityOf(repo, branch)).toBe(ORQ);
      expect(git(['rev-parse', '--verify', `refs/orq/${branch}/agent-run-1-1`], repo)).toMatch(
        /^[0-9a-f]{40}$/,
      );
      // The record is used: the same attempt again does not run the agent.
      const again = await executor.execute(executorContext(db.store, session, task));
      expect(again.log).toMatch(/agent round 1 ran in an earlier delivery of attempt 1/);
    });

    it("merges its dependencies' branches, and ends a run without changes, as orq", async () => {
      const { repo, session } = setup();
      const executor = createCommandExecutor();
      for (const id of ['t1', 't2']) {
        const done = await executor.execute(executorContext(db.store, session, { ...task, id }));
        expect(done.error).toBeUndefined();
      }
      const t3 = { ...task, id: 't3', dependencies: ['t1', 't2'] };
      const merged = await executor.execute(executorContext(db.store, session, t3));
      expect(merged.error).toBeUndefined();
      expect(merged.log).toContain(`merged ${taskBranchName(session.id, 't2')}`);
      const b3 = taskBranchName(session.id, 't3');
      const merge = git(['log', '--merges', '-1', '--format=%H', b3], repo);
      expect(merge).toMatch(/^[0-9a-f]{40}$/);
      expect(identityOf(repo, merge)).toBe(ORQ);

      const idle = setup({ template: [process.execPath, '-e', ''] });
      const empty = await executor.execute(executorContext(db.store, idle.session, task));
      expect(empty.error).toBeUndefined();
      expect(git(['log', '-1', '--format=%s', idle.branch], idle.repo)).toMatch(/made no changes/);
      expect(identityOf(idle.repo, idle.branch)).toBe(ORQ);
    });

    it("gives the agent's own commits orq's identity, where nothing names one", async () => {
      const { repo, session, branch } = setup({}, ['--commit-as-is']);
      const result = await createCommandExecutor().execute(
        executorContext(db.store, session, task),
      );
      // Before, git refused the agent's commit (Author identity unknown) and the agent failed.
      expect(result.error).toBeUndefined();
      expect(git(['log', '-1', '--format=%s', branch], repo)).toBe('fake agent: t1');
      expect(identityOf(repo, branch)).toBe(ORQ);
      expect(git(['rev-list', '--count', `main..${branch}`], repo)).toBe('1');
      // The worktree's config went with it: nothing of it is in the repository.
      expect(git(['status', '--porcelain'], repo)).toBe('');
    });

    it('lets what git has win over the fallback: the real global config, the repository, the agent', async () => {
      // A global config naming only an email: the name is orq's, the email the global one.
      const global = join(tmp, 'global.gitconfig');
      writeFileSync(global, '[user]\n\temail = grace@example.com\n');
      process.env.GIT_CONFIG_GLOBAL = global;
      try {
        const partial = setup({}, ['--commit-as-is']);
        await createCommandExecutor().execute(executorContext(db.store, partial.session, task));
        expect(identityOf(partial.repo, partial.branch)).toBe(
          'orq <grace@example.com>|orq <grace@example.com>',
        );
      } finally {
        process.env.GIT_CONFIG_GLOBAL = '/dev/null';
      }
      const configured = setup({}, ['--commit-as-is']);
      execFileSync('git', ['config', 'user.name', 'Ada'], { cwd: configured.repo });
      await createCommandExecutor().execute(executorContext(db.store, configured.session, task));
      expect(identityOf(configured.repo, configured.branch)).toBe(
        'Ada <orq@localhost>|Ada <orq@localhost>',
      );
      const own = setup({}, ['--commit']);
      await createCommandExecutor().execute(executorContext(db.store, own.session, task));
      expect(identityOf(own.repo, own.branch)).toBe(
        'Fake Agent <fake-agent@example.com>|Fake Agent <fake-agent@example.com>',
      );
    });

    it("keeps the repository's own identity where it has one", async () => {
      const { repo, session, branch } = setup();
      execFileSync('git', ['config', 'user.name', 'Ada'], { cwd: repo });
      execFileSync('git', ['config', 'user.email', 'ada@example.com'], { cwd: repo });
      await createCommandExecutor().execute(executorContext(db.store, session, task));
      expect(identityOf(repo, branch)).toBe('Ada <ada@example.com>|Ada <ada@example.com>');
    });
  });

  describe('a run whose work could not be committed', () => {
    it('is not run again by the next delivery, which commits its work; the error says what to fix', async () => {
      const runs = join(tmp, 'runs-of-uncommitted');
      const { repo, session, branch } = setup({
        template: [
          process.execPath,
          '-e',
          `const fs = require('node:fs'); fs.appendFileSync(${JSON.stringify(runs)}, 'run\\n'); fs.writeFileSync('t1.txt', 'work\\n')`,
        ],
      });
      // An identity git refuses: orq's fallback does not override a configured one.
      execFileSync('git', ['config', 'user.name', '.'], { cwd: repo });
      const executor = createCommandExecutor();
      const failed = executor.execute(executorContext(db.store, session, task));
      await expect(failed).rejects.toThrow(
        /name consists only of disallowed characters.*Set user\.name and user\.email of the repository .*orq's fallback identity orq <orq@localhost> applies/s,
      );
      expect(readFileSync(runs, 'utf8')).toBe('run\n');
      expect(git(['rev-list', '--count', `main..${branch}`], repo)).toBe('0');

      // Fixed as the hint says; the job's next delivery of the same attempt.
      execFileSync('git', ['config', '--unset', 'user.name'], { cwd: repo });
      const again = await executor.execute(executorContext(db.store, session, task));
      expect(again.error).toBeUndefined();
      expect(readFileSync(runs, 'utf8')).toBe('run\n');
      expect(again.log).toMatch(
        /agent round 1 ran in an earlier delivery of attempt 1 \(commit [0-9a-f]{12}, exit code 0\): not run again; what it left was recorded but not committed: committed now/,
      );
      expect(git(['show', `${branch}:t1.txt`], repo)).toBe('work');
      expect(git(['log', '-1', '--format=%s|%an', branch], repo)).toBe(
        'orq: t1 attempt 1: Write the parser|orq',
      );
    });
  });

  it('gives the agent the attempt and a key that is the same for every delivery of it', async () => {
    const { session } = setup({
      template: [
        process.execPath,
        '-e',
        'console.log(`key=${process.env.ORQ_IDEMPOTENCY_KEY} attempt=${process.env.ORQ_ATTEMPT}`)',
      ],
    });
    const result = await createCommandExecutor().execute(
      executorContext(db.store, session, task, { attempt: 3 }),
    );
    expect(result.output).toContain(`key=orq:${session.id}:t1:3 attempt=3`);
  });

  it('starts nothing and commits nothing once its delivery lost its job', async () => {
    const pidfile = join(tmp, 'lost-delivery.pid');
    const { repo, session, branch } = setup({}, ['--pidfile', pidfile]);
    let confirmations = 0;
    const lost = new OrqError('DELIVERY_LOST', 'work job lost its lock');
    const ctx = {
      ...executorContext(db.store, session, task),
      // Still current at the start and when it takes the task's lock; the job's lock lapses
      // during the worktree's set-up.
      confirmCurrent: () => ((confirmations += 1) <= 2 ? Promise.resolve() : Promise.reject(lost)),
    };
    await expect(createCommandExecutor().execute(ctx)).rejects.toBe(lost);
    expect(existsSync(pidfile)).toBe(false);
    expect(git(['rev-list', '--count', `main..${branch}`], repo)).toBe('0');
    // The worktree is left to the job's new delivery, which may work in it by now.
    expect(worktrees(repo)).toHaveLength(2);
  });

  it('opens nothing once its delivery lost its job while it waited for the task', async () => {
    const pidfile = join(tmp, 'lost-before-open.pid');
    const { repo, session } = setup({}, ['--pidfile', pidfile]);
    let confirmations = 0;
    const lost = new OrqError('DELIVERY_LOST', 'work job lost its lock');
    const ctx = {
      ...executorContext(db.store, session, task),
      // Current at the start; lost by the time it holds the task's lock.
      confirmCurrent: () => ((confirmations += 1) === 1 ? Promise.resolve() : Promise.reject(lost)),
    };
    await expect(createCommandExecutor().execute(ctx)).rejects.toBe(lost);
    expect(existsSync(pidfile)).toBe(false);
    expect(worktrees(repo)).toHaveLength(1);
    // The task's lock was given back: the next delivery runs at once.
    const next = await createCommandExecutor().execute(executorContext(db.store, session, task));
    expect(next.error).toBeUndefined();
  });

  it('shows the head of a diff too large to read whole, and stops git past it', async () => {
    const repo = makeRepo(tmp);
    writeFileSync(join(repo, 'big.txt'), 'line\n'.repeat(200_000));
    const whole = await gitRun(['diff', '--no-index', '/dev/null', 'big.txt'], repo);
    expect(whole.truncated).toBeUndefined();
    const head = await gitRun(
      ['diff', '--no-index', '/dev/null', 'big.txt'],
      repo,
      undefined,
      4096,
    );
    expect(head).toMatchObject({ code: 0, truncated: true });
    expect(head.stdout.length).toBeLessThanOrEqual(4096);
    expect(head.stdout).toContain('+line');
  });

  it('kills an agent that runs past timeoutSeconds, and still ends with a commit', async () => {
    // A shell prints at once; the Node fake agent could take over the 1 s limit to start on a
    // loaded machine and be killed before printing the line this test expects (seen in CI).
    const { repo, session, branch } = setup({
      timeoutSeconds: 1,
      template: ['/bin/sh', '-c', 'echo "fake agent: hanging"; exec sleep 60', 'sh', '{{prompt}}'],
    });
    const result = await createCommandExecutor().execute(executorContext(db.store, session, task));
    expect(result.error).toBe(
      'the agent command timed out after 1s and was killed; last output: fake agent: hanging',
    );
    expect(git(['log', '-1', '--format=%s', branch], repo)).toBe(
      'orq: t1 attempt 1 made no changes: Write the parser',
    );
    expect(worktrees(repo)).toHaveLength(1);
  });

  it('caps the captured output at maxOutputBytes, keeping the tail', async () => {
    const { session } = setup({ maxOutputBytes: 1024 }, ['--spam', '200000']);
    const result = await createCommandExecutor().execute(executorContext(db.store, session, task));
    const captured = result.log.slice(result.log.indexOf('agent output (tail):'));
    expect(Buffer.byteLength(captured)).toBeLessThan(1024 + 200);
    expect(captured).toContain('bytes of earlier output cut off');
    expect(result.output).toContain('fake agent edited t1.txt');
  });

  it('reports a failing agent command as the error and skips the checks', async () => {
    const { session } = setup(
      { checks: [{ name: 'fixed', command: [process.execPath, CHECK_FIXED], mode: 'block' }] },
      ['--exit', '2'],
    );
    const result = await createCommandExecutor().execute(executorContext(db.store, session, task));
    // With its last words: why it failed is there, not only in the log.
    expect(result.error).toBe(
      'the agent command exit code 2; last output: fake agent: giving up (exit 2)',
    );
    expect(result.log).not.toContain('check fixed');
  });

  describe('checks after the agent', () => {
    const check = (mode: 'block' | 'warn' | 'retry') => ({
      checks: [{ name: 'fixed', command: [process.execPath, CHECK_FIXED], mode }],
    });

    it('block: a failing check fails the execution with its output', async () => {
      const { session } = setup(check('block'));
      const result = await createCommandExecutor().execute(
        executorContext(db.store, session, task),
      );
      expect(result.error).toBe('check(s) failed: fixed (exit code 1)');
      expect(result.log).toContain('check fixed (block): FAILED, exit code 1');
      expect(result.log).toContain('check: fixed.txt is missing');
      expect(result.artifacts[0]?.meta?.checks).toEqual([
        { name: 'fixed', mode: 'block', passed: false, exitCode: 1 },
      ]);
    });

    it('warn: a failing check is recorded in the log only', async () => {
      const { session } = setup(check('warn'));
      const result = await createCommandExecutor().execute(
        executorContext(db.store, session, task),
      );
      expect(result.error).toBeUndefined();
      expect(result.log).toContain('warning: check fixed failed (mode warn)');
    });

    it('retry: the agent runs once more with the check output, then the check passes', async () => {
      const { repo, session, branch } = setup(check('retry'));
      const result = await createCommandExecutor().execute(
        executorContext(db.store, session, task),
      );
      expect(result.error).toBeUndefined();
      expect(result.log).toContain('running the agent again once for the failed check(s): fixed');
      expect(result.artifacts[0]?.meta?.checks).toEqual([
        { name: 'fixed', mode: 'retry', passed: true, exitCode: 0 },
      ]);
      expect(git(['log', '--format=%s', `main..${branch}`], repo).split('\n')).toEqual([
        'orq: t1 attempt 1 (round 2): Write the parser',
        'orq: t1 attempt 1: Write the parser',
      ]);
    });

    it('retry: a check that still fails after the one retry blocks', async () => {
      const { session } = setup({
        checks: [
          { name: 'never', command: [process.execPath, '-e', 'process.exit(1)'], mode: 'retry' },
        ],
      });
      const result = await createCommandExecutor().execute(
        executorContext(db.store, session, task),
      );
      expect(result.error).toBe('check(s) failed: never (exit code 1)');
      expect(result.log.match(/^\$ /gm)).toHaveLength(2);
    });
  });

  it('refuses a repository that is not a git repository, permanently', async () => {
    const folder = join(tmp, 'not-a-repo');
    mkdirSync(folder, { recursive: true });
    const session = makeSession({
      execution: { command: { template: ['true'], repository: folder } },
    });
    await expect(
      createCommandExecutor().execute(executorContext(db.store, session, task)),
    ).rejects.toThrow(/execution\.command\.repository: .* is not a git repository/);
  });

  it('refuses a repository without a commit, permanently, and says how to make one', async () => {
    const folder = join(tmp, 'no-commit');
    mkdirSync(folder, { recursive: true });
    git(['init', '-q'], folder);
    const session = makeSession({
      execution: { command: { template: ['true'], repository: folder } },
    });
    const error = await createCommandExecutor()
      .execute(executorContext(db.store, session, task))
      .then(
        () => undefined,
        (e: unknown) => e,
      );
    expect(error).toBeInstanceOf(ValidationError);
    expect((error as ValidationError).message).toMatch(
      /has no commit yet.*git commit --allow-empty/,
    );
  });

  it('needs execution.command', async () => {
    const session = makeSession({ execution: { defaultExecutor: 'command' } });
    await expect(
      createCommandExecutor().execute(executorContext(db.store, session, task)),
    ).rejects.toBeInstanceOf(ValidationError);
  });
});

describe('a session whose tasks run through the command executor', () => {
  let cluster: TestCluster | undefined;
  const startCluster = clusterPerTest();

  it('shows what each running agent is doing in the session view and `orq status`', async () => {
    const repo = makeRepo(tmp);
    cluster = await startCluster({
      config: {
        execution: {
          defaultExecutor: 'command',
          workspaceRoot: join(tmp, 'progress-ws'),
          command: {
            template: [process.execPath, FAKE_AGENT, '--linger', '3000', '{{prompt}}'],
            repository: repo,
          },
        },
      },
    });
    const session = await cluster.client.submit({ instruction: 'Write the parser' });
    const client = cluster.client;
    const view = await eventually(
      async () => {
        const v = await client.get(session.id);
        const running = v.tasks.find((t) => t.state === 'RUNNING' && v.progress[t.id]?.outputBytes);
        return running ? { v, running } : undefined;
      },
      'a running task with output in its progress',
      20_000,
    );
    const report = view.v.progress[view.running.id];
    expect(report).toMatchObject({ attempt: view.running.attempts });
    expect(report?.activity).toMatch(/^agent: \d+B of output; last: fake agent/);
    // The work job holds it: what Bull Board shows.
    const work = bullQueue(client.store.redis, cluster.prefix, 'work');
    try {
      const job = await work.getJob(jobIds.execute(session.id, view.running.id, 1));
      expect(job?.progress).toEqual(report);
    } finally {
      await work.close();
    }
    expect(formatSessionTable(view.v)).toMatch(
      new RegExp(
        `\\nnow:\\n  ${view.running.id}: agent: \\d+B of output; last: fake agent.* ago\\)`,
      ),
    );
    const done = await client.wait(session.id, { timeoutMs: 40_000 });
    expect(done.session.state).toBe('COMPLETED');
    // A finished task's last report is not shown.
    expect(done.progress).toEqual({});
  });

  it('ends with one branch per task and the judge verdicts in the history', async () => {
    const repo = makeRepo(tmp);
    cluster = await startCluster({
      config: {
        execution: {
          defaultExecutor: 'command',
          workspaceRoot: join(tmp, 'cluster-ws'),
          command: { template: [process.execPath, FAKE_AGENT, '{{prompt}}'], repository: repo },
        },
      },
    });
    const session = await cluster.client.submit({
      instruction: 'Write the parser and write the printer',
    });
    const view = await cluster.client.wait(session.id, { timeoutMs: 40_000 });
    expect(view.session.state).toBe('COMPLETED');
    const ids = view.tasks.map((t) => t.id).sort();
    expect(ids).toEqual(['t1', 't2', 't3']);

    const branches = git(['branch', '--list', '--format=%(refname:short)', 'orq/*'], repo)
      .split('\n')
      .sort();
    // The task branches, and the result branch the integration merged them into.
    expect(branches).toEqual(
      [...ids.map((id) => taskBranchName(session.id, id)), `orq/${session.id}/result`].sort(),
    );
    for (const id of ids) {
      expect(
        Number(git(['rev-list', '--count', `main..${taskBranchName(session.id, id)}`], repo)),
      ).toBeGreaterThan(0);
    }
    // The integration task built on its dependencies' branches.
    const t3 = taskBranchName(session.id, 't3');
    expect(git(['ls-tree', '--name-only', t3], repo).split('\n').sort()).toEqual([
      'README.md',
      't1.txt',
      't2.txt',
      't3.txt',
    ]);
    expect(worktrees(repo)).toHaveLength(1);

    const history = (await cluster.client.history(session.id)).map((h) => h.entry);
    for (const id of ids) {
      const verdict = history.find(
        (e) => e.type === 'judgement' && e.subject === 'task' && e.taskId === id,
      );
      expect(verdict, id).toMatchObject({ judgement: { success: true } });
      const execution = history.find((e) => e.type === 'execution' && e.taskId === id);
      expect(execution?.type === 'execution' && execution.result.artifacts[0]).toMatchObject({
        kind: 'git',
        meta: { branch: taskBranchName(session.id, id), exitCode: 0 },
      });
      expect(execution?.type === 'execution' && execution.result.log).toMatch(/diff stat against/);
    }
  });
});
