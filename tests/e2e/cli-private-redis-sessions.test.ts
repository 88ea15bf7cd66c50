import type { ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { createClient } from '../../src/producers/client.js';
import { SessionView } from '../../src/producers/http/schemas.js';
import { orq, root, spawnOrq, stopProcess, waitForOutput } from '../support/cli.js';
import { tempFilesPerFile } from '../support/temp-files.js';
import { allNeedRedisServer } from '../support/redis-binary.js';

// The session commands without REDIS_URL: each CLI process starts (or finds) the private
// redis-server of its working directory, as on a machine where only `orq run` was ever used.
// Apart from cli-sessions.test.ts, whose commands reach a cluster through REDIS_URL: these
// start processes one after another for most of a minute, and a file of their own runs beside
// the rest.

const blockedScenario = resolve(root, 'examples/scenarios/blocked-task.yaml');

const temp = tempFilesPerFile('orq-cli-private-sessions-');

describe('session commands without REDIS_URL', () => {
  allNeedRedisServer();
  // Nine CLI processes, four of them starting a private redis-server one after another: on two
  // cores busy with other test files that took over 30 s once.
  it(
    'without REDIS_URL where no `orq run` kept data, a session command says so and starts no Redis; a submit says how to run its session',
    { timeout: 90_000 },
    async () => {
      const cwd = mkdtempSync(join(temp.dir, 'orq-cli-nothing-here-'));
      const results = await Promise.all(
        [
          ['status', 'some-id'],
          ['history', 'some-id'],
          ['watch', 'some-id'],
          // The --run commands too: they run roles, but only for a session kept here.
          ['watch', 'some-id', '--run'],
          ['resume', 'some-id', '--run'],
        ].map((args) => orq(args, { cwd })),
      );
      for (const result of results) {
        expect(result.code, result.stderr).toBe(1);
        expect(result.stdout).toBe('');
        expect(result.stderr).toContain('No orq sessions here: REDIS_URL is not set');
        expect(result.stderr).toContain(join(cwd, '.orq', 'redis'));
      }
      expect(existsSync(join(cwd, '.orq'))).toBe(false);

      // A submit there keeps the session in a private Redis, tells how to run it, and the
      // session commands find it from then on.
      const submit = await orq(['submit', 'Write the parser'], { cwd });
      expect(submit.code, submit.stderr).toBe(0);
      const id = submit.stdout.trim();
      expect(submit.stderr).toContain(`orq watch ${id} --run`);
      const status = await orq(['status', id, '--json'], { cwd });
      expect(status.code, status.stderr).toBe(0);
      expect(SessionView.parse(JSON.parse(status.stdout)).session.state).toBe('PLANNING');
      // Nothing runs roles there: watching would wait for ever, so it says what to run.
      const watch = await orq(['watch', id], { cwd });
      expect(watch.code).toBe(1);
      expect(watch.stderr).toContain(
        `Session ${id} is PLANNING, and no roles run on the private Redis`,
      );
      expect(watch.stderr).toContain(`orq watch ${id} --run`);
      // A cancel is queued there, and says what applies it: nothing runs a coordinator.
      const cancel = await orq(['cancel', id], { cwd });
      expect(cancel.code, cancel.stderr).toBe(0);
      expect(cancel.stdout).toBe(`cancel requested for ${id}\n`);
      expect(cancel.stderr).toContain('no coordinator runs on the private Redis');
      expect(cancel.stderr).toContain(`orq watch ${id} --run\` applies it here`);
    },
  );

  // Six CLI processes in turn, each starting the private redis-server: more than 30 s on two busy cores.
  it(
    'without REDIS_URL, watch of a blocked session whose resume no coordinator applied says to run it here, and watch --run does',
    { timeout: 120_000 },
    async () => {
      const cwd = mkdtempSync(join(temp.dir, 'orq-cli-resume-pending-'));
      let dashboard: ChildProcess | undefined;
      try {
        const submit = await orq(
          [
            'submit',
            'Deploy the service',
            '--session-config',
            JSON.stringify({ llm: { scenario: blockedScenario } }),
          ],
          { cwd },
        );
        expect(submit.code, submit.stderr).toBe(0);
        const id = submit.stdout.trim();
        const blocked = await orq(['watch', id, '--run'], { cwd });
        expect(blocked.code, blocked.stderr).toBe(1);
        expect(blocked.stderr).toContain(`session ${id} is BLOCKED`);

        // A resume queued while no coordinator runs (an `orq resume --run` stopped before its
        // coordinator applied it): enqueued here through the private Redis a dashboard keeps up.
        dashboard = spawnOrq(['dashboard', '--port', '0'], { cwd });
        let stdout = '';
        dashboard.stdout?.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
        await waitForOutput(dashboard, 'Set REDIS_URL', 30_000);
        const redisUrl = /at (redis:\/\/127\.0\.0\.1:\d+)/.exec(stdout)?.[1];
        expect(redisUrl, stdout).toBeDefined();
        const client = await createClient({ connection: redisUrl! });
        try {
          await client.resume(id, { mode: 'retry' }, { waitMs: 0 });
        } finally {
          await client.close();
        }
        expect(await stopProcess(dashboard)).toBe(0);

        // No roles run on the private Redis this watch starts: it would wait for ever.
        const watch = await orq(['watch', id], { cwd });
        expect(watch.code).toBe(1);
        expect(watch.stderr).toContain(
          `Session ${id} is BLOCKED with a resume not applied yet, and no roles run on the private Redis`,
        );
        expect(watch.stderr).toContain(`orq watch ${id} --run`);
        const run = await orq(['watch', id, '--run'], { cwd });
        expect(run.code, run.stderr).toBe(0);
        expect(run.stdout.trim().split('\n').at(-1)).toMatch(/session RUNNING → COMPLETED/);
      } finally {
        if (dashboard) await stopProcess(dashboard);
      }
    },
  );

  // Five CLI processes in turn, each starting the private redis-server.
  it(
    'without REDIS_URL, a cancel of a blocked session waits for a coordinator: watch says to run it here, and watch --run applies it',
    { timeout: 120_000 },
    async () => {
      const cwd = mkdtempSync(join(temp.dir, 'orq-cli-cancel-pending-'));
      const run = await orq(['run', '--scenario', blockedScenario, 'Deploy the service'], {
        cwd,
      });
      expect(run.code, run.stderr).toBe(1);
      const id = /session (\S+)\s+BLOCKED/.exec(run.stdout)?.[1];
      expect(id, run.stdout).toBeDefined();
      const cancel = await orq(['cancel', id!], { cwd });
      expect(cancel.code, cancel.stderr).toBe(0);
      expect(cancel.stderr).toContain(`orq watch ${id} --run\` applies it here`);

      // It ended at BLOCKED, as if the session still waited for a person.
      const watch = await orq(['watch', id!], { cwd });
      expect(watch.code).toBe(1);
      expect(watch.stderr).toContain(
        `Session ${id} is BLOCKED with a cancel not applied yet, and no roles run on the private Redis`,
      );
      const applied = await orq(['watch', id!, '--run'], { cwd });
      expect(applied.stdout, applied.stderr).toContain('BLOCKED → CANCELLED');
      const status = await orq(['status', id!, '--json'], { cwd });
      expect(JSON.parse(status.stdout)).toMatchObject({ session: { state: 'CANCELLED' } });
    },
  );

  // Four CLI processes in turn, each starting the private redis-server.
  it(
    'watch --run of a finished session starts no roles: they would take the jobs of another session left queued',
    { timeout: 120_000 },
    async () => {
      const cwd = mkdtempSync(join(temp.dir, 'orq-cli-watch-finished-'));
      const run = await orq(['run', '--json', 'Write the parser'], { cwd });
      expect(run.code, run.stderr).toBe(0);
      const finished = (JSON.parse(run.stdout) as { session: { id: string } }).session.id;
      // Submitted without REDIS_URL: it waits for an `orq watch --run` of its own.
      const submit = await orq(['submit', 'Write the lexer'], { cwd });
      expect(submit.code, submit.stderr).toBe(0);
      const queued = submit.stdout.trim();

      const watch = await orq(['watch', finished, '--run'], { cwd });
      expect(watch.code, watch.stderr).toBe(0);
      expect(watch.stdout).toContain('session RUNNING → COMPLETED');
      const status = await orq(['status', queued, '--json'], { cwd });
      expect(JSON.parse(status.stdout)).toMatchObject({ session: { state: 'PLANNING' } });
    },
  );
});
