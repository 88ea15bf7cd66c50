import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, inject, it } from 'vitest';
import { startCluster, type TestCluster } from '../support/cluster.js';
import { git } from '../support/git.js';
import { FAST_LOCKS, Pods, queueEnv } from '../support/pods.js';
import { eventually, executionsOf, historyOf, scenarioDir } from '../support/scenarios.js';
import { taskBranchName } from '../../src/workers/executors/git-worktree.js';
import { tempFilesPerFile } from '../support/temp-files.js';

let cluster: TestCluster | undefined;
let pods: Pods | undefined;
const scenarios = scenarioDir();
const temp = tempFilesPerFile('orq-lock-loss-');
afterEach(async () => {
  // SIGKILL reaches a stopped process too.
  await pods?.stopAll();
  pods = undefined;
  await cluster?.close();
  cluster = undefined;
});

/**
 * The agent and the check of the command executor: each start appends a line naming its pod
 * (the parent of the process) and its task. The first agent run hangs (until the delivery that
 * takes its job over stops it); later ones wait for the test's `release` file, then write.
 */
function writeScripts(dir: string): { agent: string; check: string; starts: string } {
  const starts = join(dir, 'starts.jsonl');
  const script = (what: string, after: string) =>
    [
      `import { appendFileSync, existsSync, writeFileSync } from 'node:fs';`,
      `const dir = ${JSON.stringify(dir)};`,
      `appendFileSync(${JSON.stringify(starts)}, JSON.stringify({ what: '${what}', pod: process.ppid,`,
      `  task: process.env.ORQ_TASK_ID, key: process.env.ORQ_IDEMPOTENCY_KEY }) + '\\n');`,
      after,
    ].join('\n');
  const agent = join(dir, 'agent.mjs');
  writeFileSync(
    agent,
    script(
      'agent',
      [
        `if (!existsSync(dir + '/first')) {`,
        `  writeFileSync(dir + '/first', '');`,
        // Never ends by itself within a test; gone at last if nothing stopped it.
        `  setTimeout(() => process.exit(9), 120_000);`,
        `} else {`,
        `  const wait = setInterval(() => {`,
        `    if (!existsSync(dir + '/release')) return;`,
        `    clearInterval(wait);`,
        `    writeFileSync(process.env.ORQ_TASK_ID + '.txt', 'done\\n');`,
        `  }, 20);`,
        `}`,
      ].join('\n'),
    ),
  );
  const check = join(dir, 'check.mjs');
  writeFileSync(check, script('check', ''));
  return { agent, check, starts };
}

interface Start {
  what: 'agent' | 'check';
  pod: number;
  task: string;
  key: string;
}

const startsIn = (file: string): Start[] =>
  existsSync(file)
    ? readFileSync(file, 'utf8')
        .split('\n')
        .filter((l) => l !== '')
        .map((l) => JSON.parse(l) as Start)
    : [];

function makeRepo(dir: string): string {
  const repo = join(dir, 'repo');
  mkdirSync(repo);
  git(['init', '-q', '-b', 'main'], repo);
  writeFileSync(join(repo, 'README.md'), '# project\n');
  git(['add', '-A'], repo);
  git(['commit', '-q', '-m', 'initial'], repo);
  return repo;
}

/**
 * Issue 35, item 1: a worker pod paused (SIGSTOP) for longer than its job's lock loses the job
 * to another pod. Once it runs again (SIGCONT) it must start nothing (no commit, no check) and
 * hand on no result: the job is the other delivery's now.
 */
describe('a worker pod paused past its lock', () => {
  it('starts no side effect and hands on no result once it runs again', async () => {
    const { agent, check, starts } = writeScripts(temp.dir);
    const repo = makeRepo(temp.dir);
    cluster = await startCluster({ roles: ['planner', 'judge', 'replanner', 'coordinator'] });
    pods = new Pods({
      REDIS_URL: inject('redisUrl'),
      ORQ_PREFIX: cluster.prefix,
      ...queueEnv(FAST_LOCKS),
    });
    const paused = await pods.start('worker', ['--concurrency', '1']);
    let pausedOutput = '';
    paused.stdout?.on('data', (chunk: Buffer) => (pausedOutput += chunk.toString()));
    paused.stderr?.on('data', (chunk: Buffer) => (pausedOutput += chunk.toString()));
    const pausedPid = paused.pid as number;

    const scenario = scenarios.write('one-task', {
      plans: [{ tasks: [{ id: 'A', title: 'A', acceptance: 'a', context: 'c' }] }],
      planJudgements: [{ score: 95, isAcceptable: true }],
    });
    const { id } = await cluster.client.submit({
      instruction: 'one task run by a command',
      config: {
        llm: { scenario },
        execution: {
          defaultExecutor: 'command',
          workspaceRoot: join(temp.dir, 'ws'),
          command: {
            template: [process.execPath, agent],
            repository: repo,
            checks: [{ name: 'probe', command: [process.execPath, check] }],
          },
        },
        // The task's delivery is under test: the result branch's own checks (issue 47) would
        // run once more on whichever pod takes the integrate job.
        integration: { enabled: false },
      },
    });

    // The pod runs A's agent; it is paused there, past its lock.
    await eventually(
      () => (startsIn(starts).some((s) => s.pod === pausedPid) ? true : undefined),
      "A's agent started by the first pod",
      30_000,
    );
    paused.kill('SIGSTOP');
    const other = await pods.start('worker', ['--concurrency', '1']);
    // Another pod takes the job over once the lock has lapsed, and runs the agent again: the
    // first run's result is lost (its pod is stopped; the takeover stops its agent).
    await eventually(
      () => (startsIn(starts).some((s) => s.pod === other.pid) ? true : undefined),
      "A's agent started by the second pod",
      30_000,
    );

    // The paused pod runs again while the other delivery works on the same attempt.
    paused.kill('SIGCONT');
    // Its job's processor has ended: stopped, or (without the fix) gone on to the end, where
    // BullMQ refuses to complete a job whose lock another holds.
    await eventually(
      () =>
        /job stopped: it lost its lock|(Lock mismatch|Missing lock) for job/.test(pausedOutput)
          ? true
          : undefined,
      "the first pod's delivery to end",
      30_000,
    );
    writeFileSync(join(temp.dir, 'release'), '');
    const view = await cluster.client.wait(id, { timeoutMs: 40_000 });
    expect(view.session.state).toBe('COMPLETED');

    const all = startsIn(starts);
    // The paused pod started its agent, and nothing after it lost the job.
    expect(all.filter((s) => s.pod === pausedPid).map((s) => s.what)).toEqual(['agent']);
    expect(all.filter((s) => s.pod === other.pid).map((s) => s.what)).toEqual(['agent', 'check']);
    // Every start of the attempt saw the same key.
    expect(new Set(all.map((s) => s.key))).toEqual(new Set([`orq:${id}:A:1`]));
    expect(pausedOutput).toContain('job stopped: it lost its lock');
    // One result judged, from the delivery that held the job.
    const history = await historyOf(cluster.client, id);
    const executions = executionsOf(history, 'A');
    expect(executions).toHaveLength(1);
    expect(executions[0]?.result.error).toBeUndefined();
    expect(executions[0]?.result.artifacts[0]?.meta).toMatchObject({ exitCode: 0 });
    // The task branch has the one commit of the delivery that held the job.
    const branch = taskBranchName(id, 'A');
    expect(
      execFileSync('git', ['log', '--format=%s', `main..${branch}`], {
        cwd: repo,
        encoding: 'utf8',
      }),
    ).toBe('orq: A attempt 1: A\n');
    expect(
      history.filter((e) => e.type === 'judgement' && e.subject === 'task' && e.taskId === 'A'),
    ).toHaveLength(1);
  }, 120_000);
});
