import { execFileSync, spawnSync } from 'node:child_process';
import {
  existsSync,
  readFileSync,
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
import type { Tool } from '../../src/workers/executors/agent/tools/types.js';
import { detectSandbox, sandboxFor } from '../../src/workers/executors/sandbox.js';
import { providerKey } from '../../src/shared/config/provider-keys.js';
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

describe('files the tools must not touch (issue 41)', () => {
  it('refuses to read or overwrite a hardlink to a file outside the workspace', async () => {
    const target = join(outside, 'linked.txt');
    writeFileSync(target, 'outside content');
    // What an allowed `ln` does: the link is an ordinary name inside the workspace.
    const allowed = toolbox({ commandAllowlist: ['ln'] });
    const made = await allowed.call('run_command', { command: ['ln', target, 'hard.txt'] }, signal);
    expect(made.ok).toBe(true);
    const read = await toolbox().call('read_file', { path: 'hard.txt' }, signal);
    expect(read).toMatchObject({ ok: false, error: expect.stringContaining('2 hard links') });
    const written = await toolbox().call(
      'write_file',
      { path: 'hard.txt', content: 'overwritten' },
      signal,
    );
    expect(written).toMatchObject({ ok: false, error: expect.stringContaining('hard links') });
    const appended = await toolbox().call(
      'write_file',
      { path: 'hard.txt', content: 'more', append: true },
      signal,
    );
    expect(appended.ok).toBe(false);
    expect(readFileSync(target, 'utf8')).toBe('outside content');
    const found = await toolbox().call('search_files', { pattern: 'outside content' }, signal);
    expect(found).toEqual({ ok: true, output: 'no matches' });
    rmSync(join(root, 'hard.txt'));
  });

  it('refuses a FIFO at once, for reading and writing, instead of hanging', async () => {
    const fifo = join(root, 'pipe');
    execFileSync('mkfifo', [fifo]);
    try {
      const read = await toolbox().call('read_file', { path: 'pipe' }, signal);
      expect(read).toMatchObject({ ok: false, error: '"pipe" is not a regular file' });
      const written = await toolbox().call('write_file', { path: 'pipe', content: 'x' }, signal);
      expect(written).toMatchObject({ ok: false, error: '"pipe" is not a regular file' });
    } finally {
      rmSync(fifo);
    }
  });

  it('abandons a tool call that outlives the time limit, and stops at a cancellation', async () => {
    let sawAbort = false;
    const stuck: Tool = {
      spec: { name: 'stuck', description: 'never answers', inputSchema: {} },
      call: (_input, toolSignal) =>
        new Promise(() => {
          toolSignal.addEventListener('abort', () => (sawAbort = true));
        }),
    };
    const limited = new Toolbox([stuck], { timeoutMs: 20, graceMs: 0 });
    expect(await limited.call('stuck', {}, signal)).toEqual({
      ok: false,
      error: 'stuck did not finish within 0s (execution.toolTimeoutSeconds) and was abandoned',
    });
    expect(sawAbort).toBe(true);

    const run = new AbortController();
    const unlimited = new Toolbox([stuck]);
    const call = unlimited.call('stuck', {}, run.signal);
    run.abort(new Error('session cancelled'));
    await expect(call).rejects.toThrow('session cancelled');
  });
});

describe('the command sandbox (issue 41)', () => {
  // The pod's environment as the kernel keeps it: what /proc/<pid>/environ shows.
  const podEnviron = `/proc/${process.pid}/environ`;
  const marker = readFileSync(podEnviron, 'utf8').split('\0')[0]!;

  it("keeps an allowlisted program from reading the pod's environment", async () => {
    const sandbox = detectSandbox();
    // This machine has unshare and user namespaces; a pod without them says so in its log.
    expect(sandbox.kind).not.toBe('none');
    const tools = new Toolbox(
      createWorkspaceTools({
        root,
        timeoutMs: 10_000,
        maxOutputBytes: 65_536,
        commandAllowlist: ['cat'],
        sandbox,
      }),
    );
    const outcome = await tools.call('run_command', { command: ['cat', podEnviron] }, signal);
    expect(outcome.ok).toBe(false);
    expect(JSON.stringify(outcome)).not.toContain(marker);
    // The program runs, in the workspace, and sees its own process only.
    const own = await tools.call('run_command', { command: ['cat', 'notes.txt'] }, signal);
    expect(own).toMatchObject({ ok: true, output: expect.stringContaining('alpha') as string });

    // Without the sandbox, the same command reads it: what the sandbox is for.
    const open = await toolbox({ commandAllowlist: ['cat'] }).call(
      'run_command',
      { command: ['cat', podEnviron] },
      signal,
    );
    expect(JSON.stringify(open)).toContain(marker);
  });

  it("keeps an allowlisted program from reading the pod's key files, by any path", async () => {
    // A key mounted as a Kubernetes secret: a link into a dated directory, named by <VAR>_FILE.
    const secrets = join(base, 'secrets');
    mkdirSync(join(secrets, '..2026_11_27'), { recursive: true });
    writeFileSync(join(secrets, '..2026_11_27', 'openai'), 'sk-mounted-key-0123456789');
    symlinkSync(join(secrets, '..2026_11_27', 'openai'), join(secrets, 'openai'));
    const file = join(secrets, 'openai');
    // The pod reads its key from there.
    expect(providerKey('ORQ_SANDBOX_TEST_KEY', { ORQ_SANDBOX_TEST_KEY_FILE: file })).toBe(
      'sk-mounted-key-0123456789',
    );
    const tools = new Toolbox(
      createWorkspaceTools({
        root,
        timeoutMs: 10_000,
        maxOutputBytes: 65_536,
        commandAllowlist: ['cat'],
        sandbox: detectSandbox(),
      }),
    );
    for (const path of [file, join(secrets, '..2026_11_27', 'openai')]) {
      const outcome = await tools.call('run_command', { command: ['cat', path] }, signal);
      // It runs, and reads nothing.
      expect(outcome).toMatchObject({ ok: true });
      expect(JSON.stringify(outcome)).not.toContain('sk-mounted-key');
    }
    // Without the sandbox, the same command reads the key.
    const open = await toolbox({ commandAllowlist: ['cat'] }).call(
      'run_command',
      { command: ['cat', file] },
      signal,
    );
    expect(JSON.stringify(open)).toContain('sk-mounted-key-0123456789');
  });

  it('does not run a command when a key file cannot be covered', () => {
    // A directory cannot be covered by /dev/null: the program must not start.
    const marker = join(base, 'ran');
    const argv = detectSandbox().wrap(['touch', marker], [outside]);
    const run = spawnSync(argv[0]!, argv.slice(1), { encoding: 'utf8' });
    expect(run.status).not.toBe(0);
    expect(existsSync(marker)).toBe(false);
  });

  it('refuses commands where a sandbox is required and none works', async () => {
    const tools = new Toolbox(
      createWorkspaceTools({
        root,
        timeoutMs: 10_000,
        maxOutputBytes: 65_536,
        sandbox: { error: 'execution.toolSandbox is required, but no sandbox works here' },
      }),
    );
    const outcome = await tools.call('run_command', { command: ['true'] }, signal);
    expect(outcome).toMatchObject({ ok: false, error: expect.stringContaining('refused') });
    expect(sandboxFor('off')).toMatchObject({ kind: 'none' });
  });
});
