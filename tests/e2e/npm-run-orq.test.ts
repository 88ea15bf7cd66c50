import { execFile } from 'node:child_process';
import {
  copyFileSync,
  mkdirSync,
  mkdtempSync,
  rmSync,
  symlinkSync,
  utimesSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterEach, describe, expect, it } from 'vitest';
import { root } from '../support/cli.js';

// `npm run orq` runs scripts/orq.mjs, which runs the built CLI in dist/. Here it runs in a copy
// of the repository's layout whose dist/ holds a stand-in CLI that prints its arguments.

const run = promisify(execFile);
let dir: string | undefined;
afterEach(() => {
  if (dir) rmSync(dir, { recursive: true, force: true });
  dir = undefined;
});

function layout(): string {
  dir = mkdtempSync(join(tmpdir(), 'orq-launcher-'));
  mkdirSync(join(dir, 'scripts'));
  copyFileSync(join(root, 'scripts', 'orq.mjs'), join(dir, 'scripts', 'orq.mjs'));
  mkdirSync(join(dir, 'src', 'shared'), { recursive: true });
  writeFileSync(join(dir, 'src', 'shared', 'a.ts'), 'export {};\n');
  return dir;
}

async function launch(cwd: string, ...args: string[]) {
  try {
    const { stdout, stderr } = await run(process.execPath, ['scripts/orq.mjs', ...args], { cwd });
    return { code: 0, stdout, stderr };
  } catch (error) {
    const failed = error as { code: number; stdout: string; stderr: string };
    return { code: failed.code, stdout: failed.stdout, stderr: failed.stderr };
  }
}

describe('npm run orq (scripts/orq.mjs)', () => {
  it('before a build, says to run `npm run build` and exits 2', async () => {
    const result = await launch(layout(), 'status');
    expect(result.code).toBe(2);
    expect(result.stderr).toBe(
      'orq: not built yet: run `npm run build` first (or `npm run orq:dev -- …`, which runs the sources with tsx)\n',
    );
  });

  it('runs the built CLI with its arguments, warning when the sources are newer', async () => {
    const cwd = layout();
    const main = join(cwd, 'dist', 'producers', 'cli', 'main.js');
    mkdirSync(join(main, '..'), { recursive: true });
    writeFileSync(main, 'process.stdout.write(JSON.stringify(process.argv.slice(2)));\n');
    const fresh = await launch(cwd, 'status', '--json');
    expect(fresh).toEqual({ code: 0, stdout: '["status","--json"]', stderr: '' });

    // A source edited after the build.
    const past = new Date(Date.now() - 60_000);
    utimesSync(main, past, past);
    const stale = await launch(cwd, '--version');
    expect(stale.code).toBe(0);
    expect(stale.stdout).toBe('["--version"]');
    expect(stale.stderr).toBe(
      'orq: warning: dist/ is older than src/: run `npm run build` to use the changes\n',
    );
  });

  it('is not stopped by a link under src/ that points nowhere (an editor lock file)', async () => {
    const cwd = layout();
    const main = join(cwd, 'dist', 'producers', 'cli', 'main.js');
    mkdirSync(join(main, '..'), { recursive: true });
    writeFileSync(main, 'process.stdout.write("ran");\n');
    symlinkSync('nobody@host.1234', join(cwd, 'src', 'shared', '.#a.ts'));
    expect(await launch(cwd)).toMatchObject({ code: 0, stdout: 'ran' });
  });
});
