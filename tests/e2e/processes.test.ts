import { mkdtempSync, rmSync } from 'node:fs';
import { hostname, tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { randomUUID } from 'node:crypto';
import type { ChildProcess } from 'node:child_process';
import { freePort } from '../../src/shared/redis-server.js';
import { afterEach, describe, expect, inject, it } from 'vitest';
import { createClient, type OrqClient, type SessionView } from '../../src/producers/client.js';
import { orq, root, spawnOrq, stopProcess, waitForOutput } from '../support/cli.js';
import { startCluster } from '../support/cluster.js';
import { needsRedisServer } from '../support/redis-binary.js';

const diamond = resolve(root, 'examples/scenarios/diamond.yaml');

/** What must not depend on how many processes ran the session. */
function outcome(view: SessionView) {
  return {
    state: view.session.state,
    tasks: view.tasks
      .map((t) => ({
        id: t.id,
        state: t.state,
        attempts: t.attempts,
        deps: t.dependencies,
        output: t.result?.output,
      }))
      .sort((a, b) => a.id.localeCompare(b.id)),
  };
}

const children: ChildProcess[] = [];
afterEach(async () => {
  await Promise.all(children.splice(0).map((c) => stopProcess(c)));
});

describe('orq as separate processes', () => {
  it('gives the same result with three worker processes as with one in-process pod', async () => {
    const inProcess = await startCluster();
    const reference = await inProcess.client.submit({
      instruction: 'diamond',
      config: { llm: { scenario: diamond } },
    });
    const expected = outcome(await inProcess.client.wait(reference.id, { timeoutMs: 20_000 }));
    await inProcess.close();
    expect(expected.state).toBe('COMPLETED');

    const url = inject('redisUrl');
    const prefix = `p${randomUUID().slice(0, 8)}`;
    const env = { REDIS_URL: url, ORQ_PREFIX: prefix, ORQ_LOG_LEVEL: 'info' };
    for (const roles of ['planner,judge,replanner,coordinator', 'worker', 'worker', 'worker']) {
      const child = spawnOrq(['start', '--roles', roles], { env });
      children.push(child);
      await waitForOutput(child, 'roles started');
    }
    let client: OrqClient | undefined;
    try {
      client = await createClient({ connection: url, prefix });
      const sessions = await Promise.all(
        [1, 2, 3].map(() =>
          client!.submit({ instruction: 'diamond', config: { llm: { scenario: diamond } } }),
        ),
      );
      for (const s of sessions) {
        const view = await client.wait(s.id, { timeoutMs: 30_000 });
        expect(outcome(view)).toEqual(expected);
        const executions = (await client.history(s.id)).filter((h) => h.entry.type === 'execution');
        expect(executions).toHaveLength(view.tasks.length);
      }
    } finally {
      await client?.close();
    }
  });

  it('a pod stops on SIGTERM with exit code 0', async () => {
    const child = spawnOrq(['start', '--roles', 'worker'], {
      env: { REDIS_URL: inject('redisUrl'), ORQ_PREFIX: `p${randomUUID().slice(0, 8)}` },
    });
    await waitForOutput(child, 'roles started');
    expect(await stopProcess(child)).toBe(0);
  });

  it('a pod says first that it is starting, with its roles and name, before its roles start', async () => {
    const child = spawnOrq(['start', '--roles', 'worker,judge'], {
      env: { REDIS_URL: inject('redisUrl'), ORQ_PREFIX: `p${randomUUID().slice(0, 8)}` },
    });
    children.push(child);
    let output = '';
    child.stdout?.on('data', (chunk: Buffer) => (output += chunk.toString()));
    await waitForOutput(child, 'roles started');
    const lines = output
      .split('\n')
      .filter(Boolean)
      .map((line) => JSON.parse(line) as Record<string, unknown>);
    // In the pod's log format (pino JSON lines), the first of them all.
    expect(lines[0]).toMatchObject({
      msg: 'pod starting',
      roles: ['worker', 'judge'],
      pod: hostname(),
      level: 30,
    });
    expect(lines.findIndex((line) => line.msg === 'roles started')).toBeGreaterThan(0);
    expect(await stopProcess(child)).toBe(0);
  });

  it('a pod waiting for a Redis that does not answer stops on one SIGTERM with exit code 0', async () => {
    const child = spawnOrq(['start', '--roles', 'worker'], {
      env: { REDIS_URL: `redis://127.0.0.1:${await freePort()}` },
    });
    let output = '';
    child.stdout?.on('data', (chunk: Buffer) => (output += chunk.toString()));
    await waitForOutput(child, 'redis unreachable');
    // stopProcess sends SIGKILL after 15 s: a pod that ignored the SIGTERM exits with null.
    expect(await stopProcess(child)).toBe(0);
    expect(output).toContain('stopped while waiting for Redis');
  });

  it('orq start without a Redis URL explains what to do', async () => {
    const result = await orq(['start', '--roles', 'worker']);
    expect(result.code).toBe(2);
    expect(result.stderr).toMatch(/REDIS_URL/);
  });

  it('orq run on a machine without REDIS_URL starts its own Redis, completes, and keeps the history', async (context) => {
    needsRedisServer(context);
    const cwd = mkdtempSync(join(tmpdir(), 'orq-run-'));
    try {
      const run = await orq(['run', '認証機能とバリデーションを実装して', '--json'], { cwd });
      expect(run.code, run.stderr).toBe(0);
      const view = JSON.parse(run.stdout) as SessionView;
      expect(view.session.state).toBe('COMPLETED');
      expect(view.tasks.map((t) => t.title).join(' ')).toMatch(/認証/);
      expect(run.stderr).toMatch(/private redis-server/);

      const history = await orq(['history', view.session.id, '--jsonl'], { cwd });
      expect(history.code, history.stderr).toBe(0);
      const lines = history.stdout
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l) as { type: string; to?: string });
      expect(lines.some((l) => l.type === 'decision')).toBe(true);
      expect(lines.filter((l) => l.type === 'state_change' && l.to === 'DONE')).toHaveLength(
        view.tasks.length,
      );
      expect(lines.at(-1)).toMatchObject({ type: 'state_change', to: 'COMPLETED' });
    } finally {
      rmSync(cwd, { recursive: true, force: true });
    }
  });

  it('orq resume --run goes on, in one process, with a session orq run left blocked or out of budget', async (context) => {
    needsRedisServer(context);
    const cwd = mkdtempSync(join(tmpdir(), 'orq-run-'));
    const env = { ORQ_DATA_DIR: join(cwd, 'data') };
    const idOf = (run: { stdout: string }) => /session (\S+) submitted/.exec(run.stdout)?.[1];
    try {
      const blocked = await orq(
        ['run', 'deploy it', '--scenario', resolve(root, 'examples/scenarios/blocked-task.yaml')],
        { cwd, env },
      );
      expect(blocked.code, blocked.stderr).toBe(1);
      const id = idOf(blocked);
      expect(blocked.stderr).toMatch(
        new RegExp(`orq: session ${id} is BLOCKED \\(t2: .*\\)\\. Run \`orq resume ${id} --run\``),
      );
      // Without --run nothing would apply the resume: refused, and nothing is queued.
      const idle = await orq(['resume', `${id}`], { cwd, env });
      expect(idle.code, idle.stderr).toBe(1);
      expect(idle.stderr).toContain('nothing would apply the resume');
      expect(idle.stderr).toContain(`\`orq resume ${id} --run\``);
      // Nothing runs the roles now: --run runs them, follows the session and reports its end.
      const resumed = await orq(['resume', `${id}`, '--run'], { cwd, env });
      expect(resumed.code, resumed.stderr).toBe(0);
      expect(resumed.stdout).toContain(`orq: resume (retry) requested for ${id}`);
      // Progress from the resume on: t1 was done before it, so no line of the history is about it.
      expect(resumed.stdout).toMatch(/\] t2 BLOCKED → READY/);
      expect(resumed.stdout).not.toMatch(/\] t1 /);
      expect(resumed.stdout).toMatch(/session RUNNING → COMPLETED/);
      // A finished session is refused for what it is, not for the roles that do not run.
      const finished = await orq(['resume', `${id}`], { cwd, env });
      expect(finished.code).toBe(1);
      expect(finished.stderr).toContain(`session ${id} is COMPLETED`);
      expect(finished.stderr).not.toContain('nothing would apply');

      const stopped = await orq(
        [
          'run',
          'Run the four steps',
          '--scenario',
          resolve(root, 'examples/scenarios/budget-stop.yaml'),
          '--session-config',
          JSON.stringify({ budget: { maxTokens: 2500, reserveTokensPerCall: 600 } }),
        ],
        { cwd, env },
      );
      expect(stopped.code, stopped.stderr).toBe(1);
      const budgetId = idOf(stopped);
      expect(stopped.stderr).toContain(`Run \`orq resume ${budgetId} --max-tokens N --run\``);
      const raised = await orq(
        ['resume', `${budgetId}`, '--max-tokens', '100000', '--run', '--json'],
        { cwd, env },
      );
      expect(raised.code, raised.stderr).toBe(0);
      const view = JSON.parse(raised.stdout) as SessionView;
      expect(view.session.state).toBe('COMPLETED');
      expect(view.tasks.map((t) => t.state)).toEqual(['DONE', 'DONE', 'DONE', 'DONE']);

      const misuse = await orq(['resume', `${budgetId}`, '--json'], { cwd, env });
      expect(misuse.code).toBe(2);
      expect(misuse.stderr).toContain('--json prints the final session of --run');
    } finally {
      rmSync(cwd, { recursive: true, force: true });
    }
  }, 90_000);

  it('orq watch --run goes on with a session an interrupted orq run left', async (context) => {
    needsRedisServer(context);
    const cwd = mkdtempSync(join(tmpdir(), 'orq-run-'));
    const env = { ORQ_DATA_DIR: join(cwd, 'data') };
    try {
      // Slow model calls: the session is still planning when Ctrl-C comes.
      const run = spawnOrq(['run', '--latency', '1000', 'a then b'], { cwd, env });
      children.push(run);
      let output = '';
      run.stdout?.on('data', (chunk: Buffer) => (output += chunk.toString()));
      run.stderr?.on('data', (chunk: Buffer) => (output += chunk.toString()));
      const exited = new Promise<number | null>((r) => run.once('exit', (code) => r(code)));
      await waitForOutput(run, 'submitted');
      run.kill('SIGINT');
      expect(await exited, output).toBe(130);
      const id = /session (\S+) submitted/.exec(output)?.[1];
      // (PLANNING, unless a closing role still took one more job.)
      expect(output).toMatch(
        new RegExp(
          `orq: interrupted: session ${id} is (PLANNING|RUNNING) and waits for its roles\\. Run \`orq watch ${id} --run\``,
        ),
      );

      const watch = await orq(['watch', `${id}`, '--run', '--json'], { cwd, env });
      expect(watch.code, watch.stderr).toBe(0);
      const entries = watch.stdout
        .trim()
        .split('\n')
        .map((line) => JSON.parse(line) as { type: string; to?: string });
      expect(entries[0]).toMatchObject({ type: 'state_change', to: 'PLANNING' });
      expect(entries.at(-1)).toMatchObject({ type: 'state_change', to: 'COMPLETED' });
    } finally {
      rmSync(cwd, { recursive: true, force: true });
    }
  });

  it('orq run exits 1 when the plan is rejected, with the reason', async (context) => {
    needsRedisServer(context);
    const cwd = mkdtempSync(join(tmpdir(), 'orq-run-'));
    try {
      const run = await orq(
        ['run', 'anything', '--scenario', resolve(root, 'examples/scenarios/noisy-judge.yaml')],
        { cwd, env: { ORQ_DATA_DIR: join(cwd, 'data') } },
      );
      expect(run.code).toBe(1);
      expect(run.stdout).toMatch(/FAILED/);
      expect(run.stdout).toMatch(/refinement:reject/);
    } finally {
      rmSync(cwd, { recursive: true, force: true });
    }
  });
});
