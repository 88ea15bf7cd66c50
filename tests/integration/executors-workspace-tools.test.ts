import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  realpathSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Toolbox } from '../../src/workers/executors/agent/tools/toolbox.js';
import { createWorkspaceTools } from '../../src/workers/executors/agent/tools/workspace.js';

// Paths are fixed when the file loads: the it.each tables below are built before any hook runs.
const base = realpathSync(mkdtempSync(join(tmpdir(), 'orq-tools-')));
const root = join(base, 'workspace');
const outside = join(base, 'outside');
const signal = new AbortController().signal;

function toolbox(
  options: { timeoutMs?: number; maxOutputBytes?: number; commandAllowlist?: string[] } = {},
) {
  return new Toolbox(
    createWorkspaceTools({
      root,
      timeoutMs: options.timeoutMs ?? 10_000,
      maxOutputBytes: options.maxOutputBytes ?? 65_536,
      ...(options.commandAllowlist ? { commandAllowlist: options.commandAllowlist } : {}),
    }),
  );
}

beforeAll(() => {
  mkdirSync(root);
  mkdirSync(outside);
  writeFileSync(join(outside, 'secret.txt'), 'top secret');
  writeFileSync(join(root, 'notes.txt'), 'alpha\nbeta\ngamma\n');
  symlinkSync(outside, join(root, 'escape-dir'));
  symlinkSync(join(outside, 'secret.txt'), join(root, 'escape-file'));
  symlinkSync(join(outside, 'not-yet.txt'), join(root, 'dangling'));
  symlinkSync(join(root, 'notes.txt'), join(root, 'inner-link'));
});

afterAll(() => rmSync(base, { recursive: true, force: true }));

describe('workspace tools stay inside the task workspace', () => {
  it.each([
    ['read_file', { path: '../outside/secret.txt' }],
    ['read_file', { path: 'sub/../../outside/secret.txt' }],
    ['read_file', { path: '/etc/passwd' }],
    ['read_file', { path: 'escape-dir/secret.txt' }],
    ['read_file', { path: 'escape-file' }],
    ['list_files', { path: '..' }],
    ['list_files', { path: 'escape-dir' }],
    ['search_files', { pattern: 'secret', path: 'escape-dir' }],
    ['run_command', { command: ['cat', 'secret.txt'], cwd: 'escape-dir' }],
  ])('%s %j is refused with an observation', async (tool, input) => {
    const outcome = await toolbox().call(tool, input, signal);
    expect(outcome.ok).toBe(false);
    if (!outcome.ok) expect(outcome.error).toMatch(/outside the workspace|symlink/);
    expect(JSON.stringify(outcome)).not.toContain('top secret');
  });

  it.each([
    ['../escaped.txt', join(base, 'escaped.txt')],
    [join(outside, 'abs.txt'), join(outside, 'abs.txt')],
    ['escape-dir/planted.txt', join(outside, 'planted.txt')],
    ['dangling', join(outside, 'not-yet.txt')],
  ])('write_file to %s is refused and writes nothing outside', async (path, target) => {
    const outcome = await toolbox().call('write_file', { path, content: 'pwned' }, signal);
    expect(outcome.ok).toBe(false);
    expect(existsSync(target)).toBe(false);
  });

  it('allows an absolute path inside the workspace and a symlink that stays inside', async () => {
    const box = toolbox();
    expect(await box.call('read_file', { path: join(root, 'notes.txt') }, signal)).toMatchObject({
      ok: true,
    });
    expect(await box.call('read_file', { path: 'inner-link' }, signal)).toEqual({
      ok: true,
      output: 'alpha\nbeta\ngamma\n',
    });
  });

  it('writes, lists and searches files, creating folders on the way', async () => {
    const box = toolbox();
    expect(
      await box.call(
        'write_file',
        { path: 'src/deep/a.ts', content: 'export const beta = 1;\n' },
        signal,
      ),
    ).toMatchObject({
      ok: true,
    });
    const listed = await box.call('list_files', {}, signal);
    expect(listed.ok && listed.output.split('\n')).toEqual(
      expect.arrayContaining(['notes.txt', 'src/', 'src/deep/a.ts', 'escape-dir@']),
    );
    const found = await box.call('search_files', { pattern: 'beta' }, signal);
    expect(found.ok && found.output.split('\n').sort()).toEqual([
      'notes.txt:2: beta',
      'src/deep/a.ts:1: export const beta = 1;',
    ]);
    const regex = await box.call('search_files', { pattern: '^g', regex: true }, signal);
    expect(regex).toEqual({ ok: true, output: 'notes.txt:3: gamma' });
  });

  it('matches regular expressions in linear time (RE2): a backtracking pattern cannot hang the pod', async () => {
    mkdirSync(join(root, 'redos'), { recursive: true });
    // 26 a's keep JavaScript's RegExp to about a second here (each one more doubles it): the
    // RE2 syntax check below is what tells the two apart.
    writeFileSync(join(root, 'redos', 'a.txt'), `${'a'.repeat(26)}!\n${'a'.repeat(30)}\n`);
    const box = toolbox();
    const outcome = await box.call(
      'search_files',
      { pattern: '^(a+)+$', regex: true, path: 'redos' },
      signal,
    );
    expect(outcome).toEqual({ ok: true, output: `redos/a.txt:2: ${'a'.repeat(30)}` });
    const unsupported = await box.call(
      'search_files',
      { pattern: '(a)\\1', regex: true, path: 'redos' },
      signal,
    );
    expect(unsupported.ok).toBe(false);
    expect(!unsupported.ok && unsupported.error).toContain('RE2 syntax');
  });

  it('cuts a search short at the time limit, and says so', async () => {
    const outcome = await toolbox({ timeoutMs: 0 }).call(
      'search_files',
      { pattern: 'beta' },
      signal,
    );
    expect(outcome.ok && outcome.output).toMatch(/search stopped after 0s; search a subfolder/);
  });

  it('reads only the first toolMaxOutputBytes of a large file', async () => {
    writeFileSync(join(root, 'big.txt'), `${'b'.repeat(5000)}TAIL`);
    const outcome = await toolbox({ maxOutputBytes: 1024 }).call(
      'read_file',
      { path: 'big.txt' },
      signal,
    );
    expect(outcome).toEqual({
      ok: true,
      output: `${'b'.repeat(1024)}\n[... 3980 more bytes cut off ...]`,
    });
  });

  it('turns bad input and unknown tools into observations', async () => {
    const box = toolbox();
    expect(await box.call('read_file', { file: 'x' }, signal)).toMatchObject({
      ok: false,
      error: expect.stringContaining('invalid input'),
    });
    expect(await box.call('read_file', { path: 'missing.txt' }, signal)).toMatchObject({
      ok: false,
      error: expect.stringContaining('ENOENT'),
    });
    expect(await box.call('delete_everything', {}, signal)).toMatchObject({
      ok: false,
      error: expect.stringContaining('unknown tool'),
    });
  });
});

describe('run_command', () => {
  it('runs a program without a shell in the workspace', async () => {
    const outcome = await toolbox().call(
      'run_command',
      { command: ['node', '-e', 'console.log(process.cwd())'] },
      signal,
    );
    expect(outcome).toEqual({ ok: true, output: `exit code 0\n${root}\n` });
  });

  it('reports a non-zero exit as an error observation with the output', async () => {
    const outcome = await toolbox().call(
      'run_command',
      { command: ['node', '-e', 'console.error("boom"); process.exit(3)'] },
      signal,
    );
    expect(outcome).toEqual({ ok: false, error: 'exit code 3\nboom\n' });
  });

  it('kills a command that runs past its time limit', async () => {
    const outcome = await toolbox({ timeoutMs: 500 }).call(
      'run_command',
      { command: ['node', '-e', 'console.log("started"); setInterval(() => {}, 1000)'] },
      signal,
    );
    expect(outcome.ok).toBe(false);
    if (!outcome.ok) expect(outcome.error).toMatch(/^timed out after .* and was killed\nstarted/);
  });

  it('caps the captured output and says how much was cut', async () => {
    const outcome = await toolbox({ maxOutputBytes: 1024 }).call(
      'run_command',
      { command: ['node', '-e', 'process.stdout.write("a".repeat(100000) + "THE END")'] },
      signal,
    );
    expect(outcome.ok).toBe(true);
    if (outcome.ok) {
      expect(Buffer.byteLength(outcome.output)).toBeLessThan(1024 + 200);
      expect(outcome.output).toContain('bytes of earlier output cut off');
      expect(outcome.output.endsWith('THE END')).toBe(true);
    }
  });

  it('refuses programs outside the allowlist', async () => {
    const box = toolbox({ commandAllowlist: ['node'] });
    const refused = await box.call('run_command', { command: ['cat', 'notes.txt'] }, signal);
    expect(refused).toMatchObject({
      ok: false,
      error: expect.stringContaining('not an allowed command'),
    });
    expect(await box.call('run_command', { command: ['node', '-e', '1'] }, signal)).toMatchObject({
      ok: true,
    });
  });

  it("does not hand the pod's secrets to the command", async () => {
    process.env.ORQ_TEST_SECRET = 'hunter2';
    try {
      const outcome = await toolbox().call(
        'run_command',
        { command: ['node', '-e', 'console.log(JSON.stringify(process.env))'] },
        signal,
      );
      expect(outcome.ok).toBe(true);
      if (outcome.ok) expect(outcome.output).not.toContain('hunter2');
    } finally {
      delete process.env.ORQ_TEST_SECRET;
    }
  });
});
