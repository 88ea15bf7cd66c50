import { randomUUID } from 'node:crypto';
import { existsSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { createServer, type AddressInfo } from 'node:net';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { SessionView } from '../../src/producers/http/schemas.js';
import { freePort } from '../../src/shared/redis-server.js';
import { orq, spawnOrq, stopProcess, waitForOutput } from '../support/cli.js';
import { startCluster, type TestCluster } from '../support/cluster.js';
import { bullQueue } from '../support/pods.js';
import { tempFilesPerFile } from '../support/temp-files.js';

// The CLI's errors and exit codes as a user meets them: separate processes pointed at the roles
// (running in this test process) through REDIS_URL and ORQ_PREFIX. Apart from cli-sessions.test.ts
// (the sessions themselves), whose processes took most of two minutes on 2 busy cores in one file:
// the two run beside each other.

const temp = tempFilesPerFile('orq-cli-errors-');
let cluster: TestCluster;
let env: Record<string, string>;
const cli = (...args: string[]) => orq(args, { env });

beforeAll(async () => {
  cluster = await startCluster();
  env = { REDIS_URL: inject('redisUrl'), ORQ_PREFIX: cluster.prefix };
});
afterAll(async () => {
  await cluster?.close();
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
    // A refused option value is told as `orq: --limit: expected …`, naming the option first.
    expect(outOfRange.map((r) => r.stderr.match(/^orq: (--[a-z-]+): /)?.[1])).toEqual([
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
