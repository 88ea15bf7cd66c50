import { execFile, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { randomUUID } from 'node:crypto';
import { existsSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { createServer, type AddressInfo } from 'node:net';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { z } from 'zod';
import { SessionView } from '../../src/producers/http/schemas.js';
import { HistoryEntry } from '../../src/shared/domain/history.js';
import { freePort } from '../../src/shared/redis-server.js';
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
import { bullQueue, exited } from '../support/pods.js';
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

describe('errors and exit codes', () => {
  it('an unknown session id exits 1 with "Session <id> not found" and a hint, in every command', async () => {
    const id = 'no-such-session';
    const results = await Promise.all(
      [['status'], ['watch'], ['history', '--jsonl'], ['cancel'], ['resume']].map(
        ([command, ...rest]) => cli(command!, id, ...rest),
      ),
    );
    for (const result of results) {
      expect(result.code).toBe(1);
      expect(result.stdout).toBe('');
      expect(result.stderr).toBe(
        `orq: Session ${id} not found. List sessions with \`orq status\` (HTTP: GET /sessions) or check the Redis prefix (ORQ_PREFIX).\n`,
      );
    }
  });

  it('status and watch say when no process runs the roles a waiting session needs', async () => {
    const nobody = { ...env, ORQ_PREFIX: `${cluster.prefix}-nobody` };
    const submitted = await orq(['submit', 'Nobody plans this', '--json'], { env: nobody });
    const { id } = JSON.parse(submitted.stdout) as { id: string };
    const notice =
      `orq: no process runs the coordinator, planner, judge and worker roles on this Redis ` +
      `under the prefix "${nobody.ORQ_PREFIX}", so session ${id} waits`;
    const status = await orq(['status', id], { env: nobody });
    expect(status.code).toBe(0);
    expect(status.stderr).toContain(notice);
    const watch = spawnOrq(['watch', id], { env: nobody });
    try {
      await waitForOutput(watch, notice);
    } finally {
      await stopProcess(watch, 'SIGINT');
    }
    // Where the pods run, nothing is said.
    const served = await cli('submit', 'Plan this', '--json');
    const { id: servedId } = JSON.parse(served.stdout) as { id: string };
    expect((await cli('status', servedId)).stderr).toBe('');
  });

  it('answers `orq list` as `orq status`, and points an unknown command to orq --help', async () => {
    const [list, status, unknown] = await Promise.all([
      cli('list', '--json'),
      cli('status', '--json'),
      cli('fly'),
    ]);
    expect(list.code, list.stderr).toBe(0);
    expect(list.stdout).toBe(status.stdout);
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toBe(
      "orq: unknown command 'fly'. Run `orq --help` to see the commands.\n",
    );
  });

  // Eighteen CLI processes start here, nine at a time: on two busy cores that can take longer
  // than the default 30 s, which once failed a full run that had nothing wrong.
  it('bad usage exits 2 with one orq: line', { timeout: 120_000 }, async () => {
    const usage = await Promise.all([
      cli('status', 'not a session id!'),
      cli('status', '--limit', '0'),
      cli('history', 'whatever', '--json', '--jsonl'),
      cli('resume', 'whatever', '--max-usd', 'lots'),
      cli('submit', 'Write it', '--session-config', 'no-such-overrides.json'),
      cli('run', 'Write it', '--session-config', 'no-such-overrides.json'),
      cli('run', 'Write it', '--scenario', 'no-such-scenario.yaml'),
      cli('start', '--roles', ' , '),
      cli('submit', 'Write it', '--idempotency-key', ''),
    ]);
    // The bad id (first) and --json with --jsonl (third) are checked by the loop alone.
    const [, badOption, , badUsd, noOverrides, runNoOverrides, noScenario, noRoles, noKey] = usage;
    // Numbers out of range, and a file that cannot be written: no stack trace either.
    const outOfRange = await Promise.all([
      cli('status', '--limit', '99999999999999999999'),
      cli('dashboard', '--port', '70000'),
      cli('start', '--metrics-port', '70000'),
      cli('start', '--shutdown-timeout', '99999999999999999999'),
      cli('start', '--concurrency', '5000'),
      cli('watch', 'not a session id!'),
      cli('status', ''),
      cli('run', 'Write it', '--scenario', tmpdir()),
      cli('config', 'schema', '--out', '/dev/null/schema.json'),
    ]);
    for (const result of [...usage, ...outOfRange]) {
      expect(result.code, result.stderr).toBe(2);
      expect(result.stderr).toMatch(/^orq: .+\n$/);
    }
    expect(outOfRange.map((r) => r.stderr.match(/'(--[a-z-]+)/)?.[1])).toEqual([
      '--limit',
      '--port',
      '--metrics-port',
      '--shutdown-timeout',
      '--concurrency',
      undefined,
      undefined,
      undefined,
      undefined,
    ]);
    expect(outOfRange[6]?.stderr).toContain('Invalid session id');
    expect(outOfRange[7]?.stderr).toContain('(it is a directory)');
    expect(outOfRange[0]?.stderr).toContain('expected a whole number from 1 to 500');
    expect(outOfRange[8]?.stderr).toContain('Cannot write the schema to /dev/null/schema.json');
    expect(badOption.stderr).toContain('--limit');
    expect(badUsd.stderr).toContain('--max-usd');
    for (const result of [noOverrides, runNoOverrides]) {
      expect(result.stderr).toContain(
        '--session-config no-such-overrides.json: cannot read the file',
      );
    }
    // orq run reads its scenario before it submits: no session is left to fail in the planner.
    expect(noScenario.stderr).toMatch(
      /^orq: Cannot read scenario file .*no-such-scenario\.yaml \(no such file\)/,
    );
    expect(noScenario.stdout).not.toContain('submitted');
    expect(noRoles.stderr).toContain('--roles names no role');
    expect(noKey.stderr).toContain('idempotencyKey');
    expect(noKey.stdout).toBe('');
  });

  it('status lists no sessions with exit 0 on a Redis holding none, and where nothing has run without REDIS_URL, starting no Redis', async () => {
    const empty = { ...env, ORQ_PREFIX: `${cluster.prefix}-empty` };
    const cwd = mkdtempSync(join(temp.dir, 'orq-cli-no-sessions-'));
    const [onRedis, onRedisJson, here, hereJson] = await Promise.all([
      orq(['status'], { env: empty }),
      orq(['status', '--json'], { env: empty }),
      orq(['status'], { cwd }),
      orq(['list', '--json'], { cwd }),
    ]);
    for (const result of [onRedis, onRedisJson, here, hereJson]) {
      expect(result.code, result.stderr).toBe(0);
      expect(result.stderr).toBe('');
    }
    for (const result of [onRedis, here]) {
      expect(result.stdout).toMatch(/^no sessions yet: /);
    }
    expect(here.stdout).toContain(
      'nothing has run here (REDIS_URL is not set and .orq/redis does not exist)',
    );
    for (const result of [onRedisJson, hereJson]) {
      expect(JSON.parse(result.stdout)).toEqual([]);
    }
    expect(existsSync(join(cwd, '.orq'))).toBe(false);
  });

  it('orq run without the API key its roles need refuses before it starts anything', async () => {
    const cwd = mkdtempSync(join(temp.dir, 'orq-cli-no-key-'));
    const llm = { default: { provider: 'openai', model: 'gpt-4o-mini' } };
    const run = await orq(
      ['run', 'Write the parser', '--session-config', JSON.stringify({ llm })],
      {
        cwd,
      },
    );
    expect(run.code, run.stderr).toBe(2);
    expect(run.stderr).toMatch(/^orq: No API key for the planner model \(openai\)/);
    expect(run.stderr).toContain('OPENAI_API_KEY');
    // No Redis was started, so no session was left behind to fail later.
    expect(existsSync(join(cwd, '.orq'))).toBe(false);
  });

  it('a --session-config setting a submit refuses names the option and its file, before any Redis starts', async () => {
    const cwd = mkdtempSync(join(temp.dir, 'orq-cli-unpriced-'));
    writeFileSync(
      join(cwd, 'session.yaml'),
      'llm:\n  default:\n    provider: openai\n    model: gpt-4o-mini\nbudget:\n  maxUsd: 1\n',
    );
    const unpriced =
      'budget.prices: maxUsd needs a price for every model the roles use; none for gpt-4o-mini';
    const results = await Promise.all(
      ['submit', 'run'].map((command) =>
        orq([command, 'Write it', '--session-config', 'session.yaml'], { cwd }),
      ),
    );
    for (const result of results) {
      expect(result.code, result.stderr).toBe(2);
      expect(result.stderr).toMatch(/^orq: Invalid --session-config session\.yaml: /);
      expect(result.stderr).toContain(unpriced);
    }
    const inline = await orq(
      ['submit', 'Write it', '--session-config', '{"budget":{"maxTokens":-1}}'],
      { cwd },
    );
    expect(inline.code, inline.stderr).toBe(2);
    expect(inline.stderr).toMatch(/^orq: Invalid --session-config: budget\.maxTokens: /);
    // Refused before a private Redis was started for the submit.
    expect(existsSync(join(cwd, '.orq'))).toBe(false);
  });

  it('watch --run checks the API keys of a session it would run before its roles start', async () => {
    // A prefix no roles serve: the session waits in PLANNING for whoever runs its roles.
    const idle = { ...env, ORQ_PREFIX: `idle${randomUUID().slice(0, 8)}` };
    const llm = { default: { provider: 'openai', model: 'gpt-4o-mini' } };
    const submit = await orq(
      ['submit', 'Write the parser', '--session-config', JSON.stringify({ llm })],
      {
        env: idle,
      },
    );
    expect(submit.code, submit.stderr).toBe(0);
    const id = submit.stdout.trim();

    const watch = await orq(['watch', id, '--run'], { env: idle });
    expect(watch.code, watch.stderr).toBe(2);
    expect(watch.stderr).toMatch(/^orq: No API key for the planner model \(openai\)/);
    // Refused before any role ran: the planner's job waits, with no attempt spent.
    const plan = bullQueue(cluster.client.store.redis, idle.ORQ_PREFIX, 'plan');
    try {
      const [job] = await plan.getJobs(['waiting', 'prioritized']);
      expect(job?.data).toMatchObject({ sessionId: id });
      expect(job?.attemptsMade).toBe(0);
    } finally {
      await plan.close();
    }
    const status = await orq(['status', id, '--json'], { env: idle });
    expect(SessionView.parse(JSON.parse(status.stdout)).session.state).toBe('PLANNING');

    // resume --run checks only a session it can resume: this one says why it cannot.
    const resume = await orq(['resume', id, '--run'], { env: idle });
    expect(resume.code, resume.stderr).toBe(1);
    expect(resume.stderr).toContain(`session ${id} is PLANNING`);
  });

  it('watch --run checks the API keys of a stopped session whose resume it would apply before its roles start', async () => {
    // No roles of its own: the resume stays queued, as when its coordinator stopped.
    const own = await startCluster({ pods: 0 });
    try {
      const llm = { default: { provider: 'openai', model: 'gpt-4o-mini' } };
      const { id } = await own.client.submit({ instruction: 'Write the parser', config: { llm } });
      const { session, version } = await own.client.store.requireSession(id);
      await own.client.store.apply(id, {
        eventId: `test-budget-stop|${id}`,
        session: { record: { ...session, state: 'BUDGET_EXHAUSTED' }, expectedVersion: version },
      });
      await own.client.resume(id, { budget: { maxTokens: 100_000 } }, { waitMs: 0 });
      expect(await own.client.resumePending(id)).toBe(true);

      const watch = await orq(['watch', id, '--run'], { env: { ...env, ORQ_PREFIX: own.prefix } });
      expect(watch.code, watch.stderr).toBe(2);
      expect(watch.stderr).toMatch(/^orq: No API key for the planner model \(openai\)/);
      // Refused before any role ran: the resume still waits for a coordinator.
      expect(await own.client.resumePending(id)).toBe(true);
    } finally {
      await own.close();
    }
  });

  it('an unreachable Redis exits 3 with a message naming Redis, orq run too', async () => {
    const port = await freePort();
    const unreachable = { ...env, REDIS_URL: `redis://127.0.0.1:${port}` };
    const [status, run] = await Promise.all([
      orq(['status'], { env: unreachable }),
      // Its roles' consumers would wait for Redis for ever: the command must not.
      orq(['run', 'Write the parser'], { env: unreachable, timeoutMs: 20_000 }),
    ]);
    for (const result of [status, run]) {
      expect(result.code, result.stderr).toBe(3);
      expect(result.stderr).toMatch(/^orq: Redis at 127\.0\.0\.1:\d+ is unreachable/);
    }
  });

  it('a taken port exits 3 naming the port and the option that sets it', async () => {
    const taken = createServer();
    await new Promise<void>((done) => taken.listen(0, '127.0.0.1', done));
    const port = String((taken.address() as AddressInfo).port);
    try {
      const [pod, dashboard] = await Promise.all([
        orq(['start', '--roles', 'worker', '--metrics-port', port, '--metrics-host', '127.0.0.1'], {
          env,
        }),
        orq(['dashboard', '--port', port, '--host', '127.0.0.1'], { env }),
      ]);
      for (const [result, option] of [
        [pod, '--metrics-port'],
        [dashboard, '--port'],
      ] as const) {
        expect(result.code, result.stderr).toBe(3);
        expect(result.stderr).toMatch(
          new RegExp(`^orq: Port ${port} on 127\\.0\\.0\\.1 is already in use\\. .*${option}`),
        );
        expect(result.stderr.trim().split('\n')).toHaveLength(1);
      }
    } finally {
      taken.close();
    }
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
