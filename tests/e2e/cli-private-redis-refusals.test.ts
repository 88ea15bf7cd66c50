import { existsSync, mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { orq } from '../support/cli.js';
import { tempFilesPerFile } from '../support/temp-files.js';
import { needsRedisServer } from '../support/redis-binary.js';

// `orq run` without REDIS_URL starts a private redis-server under .orq/redis: what it refuses
// must be refused before that, and leave nothing behind.

const temp = tempFilesPerFile('orq-private-refusals-');

describe('orq run refusals before its private Redis', () => {
  it('refuses an empty instruction (run and submit) before starting a server, leaving no .orq behind', async () => {
    const cwd = mkdtempSync(join(temp.dir, 'empty-'));
    const run = await orq(['run', '  '], { cwd });
    expect(run.code, run.stderr).toBe(2);
    expect(run.stderr).toContain('instruction must not be empty');
    expect(run.stdout + run.stderr).not.toContain('started a private redis-server');
    expect(existsSync(join(cwd, '.orq'))).toBe(false);
    // orq submit starts the private Redis too: refused before it alike.
    const submit = await orq(['submit', ''], { cwd });
    expect(submit.code, submit.stderr).toBe(2);
    expect(submit.stderr).toContain('instruction must not be empty');
    expect(existsSync(join(cwd, '.orq'))).toBe(false);
  });

  it('refuses a scenario that does not load for orq submit, whose roles run here, before starting a server', async () => {
    const cwd = mkdtempSync(join(temp.dir, 'scenario-'));
    writeFileSync(join(cwd, 'broken.json'), '{"plans": 3}');
    const results = await Promise.all(
      [
        ['submit', 'Write the parser', '--scenario', 'missing.yaml'],
        ['submit', 'Write the parser', '--session-config', '{"llm":{"scenario":"missing.yaml"}}'],
        ['submit', 'Write the parser', '--scenario', 'broken.json'],
      ].map((args) => orq(args, { cwd })),
    );
    const [missing, viaOverrides, broken] = results;
    for (const result of [missing, viaOverrides]) {
      expect(result?.code, result?.stderr).toBe(2);
      expect(result?.stderr).toContain(
        `orq: Cannot read scenario file ${join(cwd, 'missing.yaml')} (no such file)`,
      );
    }
    expect(broken?.code, broken?.stderr).toBe(2);
    expect(broken?.stderr).toContain(`Invalid scenario in ${join(cwd, 'broken.json')}: plans:`);
    for (const result of results) expect(result.stdout).toBe('');
    expect(existsSync(join(cwd, '.orq'))).toBe(false);
  });

  it('refuses an empty or malformed --task of orq resume as bad usage naming --task, before any Redis starts', async () => {
    const cwd = mkdtempSync(join(temp.dir, 'empty-task-'));
    const results = await Promise.all(
      [
        ['resume', 'some-session', '--task', ''],
        ['resume', 'some-session', '--task', ' , '],
        // --run starts the private Redis to run the roles in: refused before it too.
        ['resume', 'some-session', '--task', '', '--run'],
        ['resume', 'some-session', '--task', 't1', '--task', 'not an id', '--run'],
      ].map((args) => orq(args, { cwd })),
    );
    const [empty, commas, emptyRun, malformed] = results;
    for (const result of results) {
      expect(result.code, result.stderr).toBe(2);
      expect(result.stderr).toMatch(/^orq: --task: .+\n$/);
      expect(result.stdout).toBe('');
    }
    for (const result of [empty, commas, emptyRun]) {
      expect(result?.stderr).toContain('the task id is empty');
    }
    expect(malformed?.stderr).toContain('"not an id" is not a task id');
    expect(existsSync(join(cwd, '.orq'))).toBe(false);
  });

  it('says in one line that ORQ_DATA_DIR cannot be made, with exit 3 and no stack trace', async (context) => {
    needsRedisServer(context);
    const cwd = mkdtempSync(join(temp.dir, 'data-dir-'));
    writeFileSync(join(cwd, 'afile'), '');
    const run = await orq(['run', 'a then b'], { cwd, env: { ORQ_DATA_DIR: 'afile/sub' } });
    expect(run.code, run.stderr).toBe(3);
    expect(run.stderr).toContain(
      `Cannot create ${join(cwd, 'afile/sub/redis')} for orq's private Redis: a part of the path is a file, not a directory`,
    );
    expect(run.stderr).toContain('ORQ_DATA_DIR');
    expect(run.stderr).not.toMatch(/^\s+at /m);
  });

  it('without redis-server installed says so and leaves no empty .orq behind', async () => {
    const cwd = mkdtempSync(join(temp.dir, 'no-server-'));
    // An empty PATH: no redis-server on it (orq itself runs from process.execPath).
    const bin = join(cwd, 'bin');
    mkdirSync(bin);
    const run = await orq(['run', 'a then b'], { cwd, env: { PATH: bin } });
    expect(run.code, run.stderr).toBe(3);
    expect(run.stderr).toContain('redis-server is not installed');
    expect(existsSync(join(cwd, '.orq'))).toBe(false);
  });
});
