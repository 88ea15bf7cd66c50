import { execFile, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { z } from 'zod';
import { SessionView } from '../../src/producers/http/schemas.js';
import { HistoryEntry } from '../../src/shared/domain/history.js';
import {
  cleanEnv,
  cliMain,
  orq,
  root,
  spawnOrq,
  stopProcess,
  waitForOutput,
} from '../support/cli.js';
import { startCluster, type TestCluster } from '../support/cluster.js';
import { exited } from '../support/pods.js';
import { tempFilesPerFile } from '../support/temp-files.js';

// The CLI as a user runs it: separate processes pointed at the roles (running in this test
// process) through REDIS_URL and ORQ_PREFIX.

const blockedScenario = resolve(root, 'examples/scenarios/blocked-task.yaml');
const budgetScenario = resolve(root, 'examples/scenarios/budget-stop.yaml');

const temp = tempFilesPerFile('orq-cli-sessions-');
let cluster: TestCluster;
let env: Record<string, string>;
const cli = (...args: string[]) => orq(args, { env });
const jsonLines = (text: string) =>
  text
    .trim()
    .split('\n')
    .map((line) => HistoryEntry.parse(JSON.parse(line)));

beforeAll(async () => {
  cluster = await startCluster();
  env = { REDIS_URL: inject('redisUrl'), ORQ_PREFIX: cluster.prefix };
});
afterAll(async () => {
  await cluster?.close();
});

/** `orq submit` of the blocked-task scenario (seed 001): t2 blocks until a person resumes it. */
async function submitBlocked(): Promise<string> {
  const submit = await cli(
    'submit',
    'Deploy the service',
    '--session-config',
    JSON.stringify({ llm: { scenario: blockedScenario } }),
  );
  expect(submit.code, submit.stderr).toBe(0);
  return submit.stdout.trim();
}

describe('a session driven through the CLI', () => {
  let sessionId: string;

  it('submit prints the new session id', async () => {
    const submit = await cli('submit', 'Implement login, then add input validation');
    expect(submit.code, submit.stderr).toBe(0);
    sessionId = submit.stdout.trim();
    expect(sessionId).toMatch(/^[0-9a-f-]{36}$/);
  });

  it('submit - reads the instruction from stdin', async () => {
    const child = spawnOrq(['submit', '-'], { env, stdin: true });
    let stdout = '';
    child.stdout?.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
    child.stdin?.end('Write the release notes\nfor version 2\n');
    const [code] = (await once(child, 'exit')) as [number | null];
    expect(code).toBe(0);
    const { session } = await cluster.client.get(stdout.trim());
    expect(session.instruction).toBe('Write the release notes\nfor version 2');
  });

  it('watch without a terminal prints one plain line per entry, ends at COMPLETED, exits 0', async () => {
    const watch = await cli('watch', sessionId);
    expect(watch.code, watch.stderr).toBe(0);
    const lines = watch.stdout.trim().split('\n');
    expect(lines.length).toBe((await cluster.client.history(sessionId)).length);
    expect(lines.at(-1)).toMatch(/session RUNNING → COMPLETED/);
    expect(watch.stdout).not.toContain('\u001b[');
  });

  it('status --json prints the session and its tasks', async () => {
    const status = await cli('status', sessionId, '--json');
    expect(status.code, status.stderr).toBe(0);
    const view = SessionView.parse(JSON.parse(status.stdout));
    expect(view.session).toMatchObject({ id: sessionId, state: 'COMPLETED' });
    expect(view.tasks.length).toBeGreaterThan(1);
    expect(view.tasks.every((t) => t.state === 'DONE')).toBe(true);
  });

  it('status prints a table with each task, its state and attempts', async () => {
    const [status, view] = await Promise.all([
      cli('status', sessionId),
      cluster.client.get(sessionId),
    ]);
    expect(status.code, status.stderr).toBe(0);
    expect(status.stdout).toMatch(/TASK\s+STATE\s+ATTEMPTS/);
    expect(status.stdout).toContain(`${view.tasks.length} tasks: ${view.tasks.length} DONE`);
    for (const task of view.tasks) {
      expect(status.stdout).toMatch(new RegExp(`^${task.id}\\s+DONE\\s+1\\s`, 'm'));
    }
  });

  it('history --jsonl prints every entry as a HistoryEntry line, and --json as one array', async () => {
    const [jsonl, json] = await Promise.all([
      cli('history', sessionId, '--jsonl'),
      cli('history', sessionId, '--json'),
    ]);
    expect(jsonl.code, jsonl.stderr).toBe(0);
    const entries = jsonLines(jsonl.stdout);
    expect(entries).toHaveLength((await cluster.client.history(sessionId)).length);
    expect(entries.every((e) => e.sessionId === sessionId)).toBe(true);
    expect(entries.at(-1)).toMatchObject({ type: 'state_change', to: 'COMPLETED' });
    expect(json.code, json.stderr).toBe(0);
    expect(z.array(HistoryEntry).parse(JSON.parse(json.stdout))).toEqual(entries);
  });

  it('watch --json prints the history as JSON lines', async () => {
    const watch = await cli('watch', sessionId, '--json');
    expect(watch.code, watch.stderr).toBe(0);
    expect(jsonLines(watch.stdout).at(-1)).toMatchObject({ type: 'state_change', to: 'COMPLETED' });
  });
});

describe('blocked sessions', () => {
  it('watch exits 1 and says how to resume; after `orq resume` the session completes', async () => {
    const sessionId = await submitBlocked();
    const blocked = await cli('watch', sessionId);
    expect(blocked.code).toBe(1);
    // The blocked task, with why (the judge's verdict in the scenario).
    expect(blocked.stderr).toContain(`orq: session ${sessionId} is BLOCKED (t2: The judge found`);
    expect(blocked.stderr).toContain('refuses the credentials');
    expect(blocked.stderr).toContain(`orq resume ${sessionId}`);

    const status = await cli('status', sessionId);
    expect(status.stdout).toMatch(/^t2\s+BLOCKED\s+1\s/m);
    expect(status.stdout).toMatch(/^t2 is blocked: The judge found the task failed/m);

    // An empty note is a mistake, not a retry; nothing is requested.
    const emptyNote = await cli('resume', sessionId, '--note', '');
    expect(emptyNote.code).toBe(2);
    expect(emptyNote.stderr).toContain('--note needs a text');

    // --task takes one id (repeat it for more), so the session id may follow it.
    const resume = await cli('resume', '--task', 't2', sessionId);
    expect(resume.code, resume.stderr).toBe(0);
    expect(resume.stdout).toContain(`resume (retry) requested for ${sessionId}`);
    // The roles of this test run: no warning of missing ones.
    expect(resume.stderr).toBe('');

    const done = await cli('watch', sessionId);
    expect(done.code, done.stderr).toBe(0);
    expect(done.stdout.trim().split('\n').at(-1)).toMatch(/session RUNNING → COMPLETED/);
    const { tasks } = await cluster.client.get(sessionId);
    expect(tasks.find((t) => t.id === 't2')).toMatchObject({ state: 'DONE', attempts: 2 });
  });

  it('watch after a resume the coordinator applies later follows the session to its end, not the BLOCKED state from before', async () => {
    // Roles of their own: this test stops the coordinator, which the other tests need.
    const own = await startCluster({ roles: ['planner', 'judge', 'worker', 'replanner'] });
    let child: ChildProcess | undefined;
    try {
      const coordinator = await own.startPod(['coordinator']);
      const { id } = await own.client.submit({
        instruction: 'Deploy the service',
        config: { llm: { scenario: blockedScenario } },
      });
      const blocked = await own.client.wait(id, { timeoutMs: 30_000 });
      expect(blocked.session.state).toBe('BLOCKED');
      await coordinator.close(5_000);
      // As `orq resume` leaves it when its 5 s pass before the coordinator applies the request.
      await own.client.resume(id, { mode: 'retry' }, { waitMs: 0 });

      const ownEnv = { ...env, ORQ_PREFIX: own.prefix };
      const watching = spawnOrq(['watch', id], { env: ownEnv });
      child = watching;
      let stdout = '';
      watching.stdout?.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
      // It says who it waits for, and waits.
      await waitForOutput(watching, 'no process runs the coordinator role');
      await new Promise((r) => setTimeout(r, 1_500));
      expect(watching.exitCode).toBeNull();

      await own.startPod(['coordinator']);
      expect(await exited(watching), stdout).toBe(0);
      expect(stdout.trim().split('\n').at(-1)).toMatch(/session RUNNING → COMPLETED/);
    } finally {
      if (child) await stopProcess(child);
      await own.close();
    }
  });

  it('a relative scenario path in --session-config is the one where orq submit runs, not where the pods run', async () => {
    // The pods (this test process) run in the repository's root; the user in the scenarios' folder.
    const submit = await orq(
      [
        'submit',
        'Deploy the service',
        '--session-config',
        '{"llm":{"scenario":"blocked-task.yaml"}}',
      ],
      { env, cwd: resolve(root, 'examples/scenarios') },
    );
    expect(submit.code, submit.stderr).toBe(0);
    const sessionId = submit.stdout.trim();
    expect((await cluster.client.get(sessionId)).session.config.llm.scenario).toBe(blockedScenario);
    const blocked = await cli('watch', sessionId);
    expect(blocked.stderr).toContain(`orq: session ${sessionId} is BLOCKED (t2: The judge found`);
  });

  it('submit --scenario scripts the session with that file, resolved where orq submit runs', async () => {
    const submit = await orq(['submit', 'Deploy the service', '--scenario', 'blocked-task.yaml'], {
      env,
      cwd: resolve(root, 'examples/scenarios'),
    });
    expect(submit.code, submit.stderr).toBe(0);
    expect(submit.stderr).toBe('');
    const sessionId = submit.stdout.trim();
    expect((await cluster.client.get(sessionId)).session.config.llm.scenario).toBe(blockedScenario);
    const blocked = await cli('watch', sessionId);
    expect(blocked.stderr).toContain(`orq: session ${sessionId} is BLOCKED (t2: The judge found`);
  });

  it('submit to pods elsewhere warns of a scenario file it cannot read here, and submits', async () => {
    // No roles under this prefix: the session only waits, it is never run on the missing file.
    const noRoles = { ...env, ORQ_PREFIX: `${cluster.prefix}-elsewhere` };
    const cwd = mkdtempSync(join(temp.dir, 'orq-submit-scenario-'));
    const submit = await orq(['submit', 'Write the parser', '--scenario', 'only-on-pods.yaml'], {
      env: noRoles,
      cwd,
    });
    expect(submit.code, submit.stderr).toBe(0);
    expect(submit.stderr).toBe(
      `orq: warning: Cannot read scenario file ${join(cwd, 'only-on-pods.yaml')} (no such file). Submitted anyway: the roles read the scenario where they run, so check that they have it at that path\n`,
    );
    const id = submit.stdout.trim();
    const status = await orq(['status', id, '--json'], { env: noRoles });
    expect(SessionView.parse(JSON.parse(status.stdout)).session.config.llm.scenario).toBe(
      join(cwd, 'only-on-pods.yaml'),
    );
  });

  it('cancel turns a blocked session CANCELLED; cancelling it again exits 1', async () => {
    const sessionId = await submitBlocked();
    await cluster.client.wait(sessionId, { until: 'settled', timeoutMs: 30_000 });
    const cancel = await cli('cancel', sessionId, '--reason', 'not needed any more');
    expect(cancel.code, cancel.stderr).toBe(0);
    expect(cancel.stdout).toBe(`cancel requested for ${sessionId}\n`);
    expect(cancel.stderr).toBe('');
    const view = await cluster.client.wait(sessionId, { until: 'finished', timeoutMs: 30_000 });
    expect(view.session.state).toBe('CANCELLED');
    expect(view.tasks.find((t) => t.id === 't3')?.state).toBe('CANCELLED');

    const again = await cli('cancel', sessionId);
    expect(again.code).toBe(1);
    expect(again.stderr).toMatch(/^orq: Session \S+ is already CANCELLED\./);
  });

  it('cancel says so when no coordinator runs to apply it', async () => {
    const noRoles = { ...env, ORQ_PREFIX: `${cluster.prefix}-no-coordinator` };
    const submit = await orq(['submit', 'Write the parser'], { env: noRoles });
    expect(submit.code, submit.stderr).toBe(0);
    const id = submit.stdout.trim();
    const cancel = await orq(['cancel', id], { env: noRoles });
    expect(cancel.code, cancel.stderr).toBe(0);
    expect(cancel.stdout).toBe(`cancel requested for ${id}\n`);
    expect(cancel.stderr).toContain(
      `orq: no process runs the coordinator role on this Redis under the prefix "${noRoles.ORQ_PREFIX}", so the cancel waits until one does`,
    );
  });
});

describe('deleting and pruning', () => {
  it('delete refuses a blocked session, deletes it once cancelled, and tries every id it is given', async () => {
    const sessionId = await submitBlocked();
    await cluster.client.wait(sessionId, { until: 'settled', timeoutMs: 30_000 });
    const refused = await cli('delete', sessionId);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toBe(
      `orq: session ${sessionId} is BLOCKED: only a finished session can be deleted. Cancel it first (orq cancel ${sessionId}, or POST /sessions/${sessionId}/cancel); delete it once it is CANCELLED.\n`,
    );
    await cli('cancel', sessionId);
    await cluster.client.wait(sessionId, { until: 'finished', timeoutMs: 30_000 });

    const deleted = await cli('delete', 'no-such-session', sessionId);
    expect(deleted.code).toBe(1);
    expect(deleted.stdout).toBe(`deleted ${sessionId} (CANCELLED)\n`);
    expect(deleted.stderr).toMatch(/^orq: Session no-such-session not found\./);
    expect((await cli('status', sessionId)).code).toBe(1);
  });

  it('prune --dry-run lists the finished sessions it would delete, and deletes none', async () => {
    const done = await cluster.client.submit({ instruction: 'done soon' });
    await cluster.client.wait(done.id, { timeoutMs: 30_000 });
    await new Promise((r) => setTimeout(r, 10));
    const dry = await cli('prune', '--older-than', '0s', '--dry-run', '--json');
    expect(dry.code, dry.stderr).toBe(0);
    const report = JSON.parse(dry.stdout) as { deleted: string[]; dryRun: boolean };
    expect(report.deleted).toContain(done.id);
    expect(report.dryRun).toBe(true);
    expect((await cluster.client.get(done.id)).session.state).toBe('COMPLETED');
    const text = await cli('prune', '--older-than', '1d', '--dry-run');
    expect(text.stdout).toBe('would delete 0 sessions\n');

    for (const args of [
      ['prune', '--older-than', '7'],
      ['prune'],
      ['prune', '--older-than', '7d', '--state', 'RUNNING'],
    ]) {
      const bad = await cli(...args);
      expect(bad.code, args.join(' ')).toBe(2);
      expect(bad.stderr, args.join(' ')).toMatch(/^orq: /);
    }
  });
});

describe('a session its budget stopped', () => {
  it('resume refuses it without a higher limit and goes on with one', async () => {
    const submit = await cli(
      'submit',
      'Run the four steps',
      '--session-config',
      JSON.stringify({
        llm: { scenario: budgetScenario },
        budget: { maxTokens: 2500, reserveTokensPerCall: 600 },
      }),
    );
    expect(submit.code, submit.stderr).toBe(0);
    const sessionId = submit.stdout.trim();
    const stopped = await cluster.client.wait(sessionId, { timeoutMs: 30_000 });
    expect(stopped.session.state).toBe('BUDGET_EXHAUSTED');

    const refused = await cli('resume', sessionId);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toContain('resumes only with a higher budget');
    expect(refused.stderr).toContain(`orq resume ${sessionId} --max-tokens N`);

    const resumed = await cli('resume', sessionId, '--max-tokens', '100000');
    expect(resumed.code, resumed.stderr).toBe(0);
    expect(resumed.stdout).toContain(`resume (with a higher budget) requested for ${sessionId}`);
    const done = await cluster.client.wait(sessionId, { timeoutMs: 30_000 });
    expect(done.session.state).toBe('COMPLETED');
    expect(done.tasks.map((t) => t.state)).toEqual(['DONE', 'DONE', 'DONE', 'DONE']);
  });
});

describe('watch in a terminal', () => {
  it('redraws a live view in place and leaves the final state on screen', async () => {
    const submit = await cli('submit', 'Write the parser, then write the tests');
    const sessionId = submit.stdout.trim();
    // `script` gives the CLI a pseudo-terminal; its output is what the terminal received.
    const command = `stty cols 120 rows 40; exec '${process.execPath}' '${cliMain()}' watch ${sessionId}`;
    const tty = await new Promise<{ code: number; output: string }>((done) => {
      execFile(
        'script',
        ['-qfec', command, '/dev/null'],
        { cwd: root, env: cleanEnv({ ...env, TERM: 'xterm' }), timeout: 60_000 },
        (error, stdout) => done({ code: error ? Number(error.code ?? 1) : 0, output: stdout }),
      );
    });
    expect(tty.code, tty.output).toBe(0);
    const { output } = tty;
    // log-update erases the previous frame line by line (erase line, cursor up) before redrawing.
    expect(output).toContain('\u001b[2K\u001b[1A');
    expect(output).toContain('\u001b[?25h'); // the cursor is shown again at the end
    const lastFrame = output.slice(output.lastIndexOf('\u001b[G'));
    expect(lastFrame).toContain(`session ${sessionId}  COMPLETED`);
    // The final frame has the columns of the table a plain `orq run` ends with.
    expect(lastFrame).toMatch(
      /TASK\s+STATE\s+ATTEMPTS\s+TIME\s+DEPENDS ON\s+TOKENS IN\/OUT\s+TITLE/,
    );
    expect(lastFrame).toMatch(/recent:[\s\S]*session RUNNING → COMPLETED/);
    const { tasks } = await cluster.client.get(sessionId);
    // Each with the time of its execution: 0.3s, 12s, ...
    for (const task of tasks) {
      expect(lastFrame).toMatch(new RegExp(`${task.id}\\s+DONE\\s+1\\s+\\d+(\\.\\d)?s\\s`));
    }
  });
});
