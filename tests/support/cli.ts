import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { inject } from 'vitest';

export const root = fileURLToPath(new URL('../..', import.meta.url));

/** The CLI's entry: src/ transpiled once for this test run (global-cli.ts), an absolute path. */
export const cliMain = (): string => inject('cliMain');

/** The directory the CLI's modules run from, dist/'s layout: `${cliModules()}/producers/…`. */
export const cliModules = (): string => resolve(dirname(cliMain()), '../..');

export interface CliResult {
  code: number;
  stdout: string;
  stderr: string;
}

/**
 * The environment without any orq or Redis variable of the machine running the tests, and with
 * Node's compile cache off: the CLI runs from a new directory each test run, and the cache
 * (keyed by path) would gain its modules anew every time. cli-startup.test.ts tests the cache.
 */
export function cleanEnv(env: Record<string, string | undefined>): NodeJS.ProcessEnv {
  const base = Object.fromEntries(
    Object.entries(process.env).filter(
      // OTEL_*: a machine's tracing setup would make every test pod export traces.
      ([name]) => !name.startsWith('ORQ') && !name.startsWith('OTEL_') && name !== 'REDIS_URL',
    ),
  );
  // A variable given as undefined is left unset: NODE_DISABLE_COMPILE_CACHE turns the cache off
  // whatever its value, even 0.
  return Object.fromEntries(
    Object.entries({ ...base, NODE_DISABLE_COMPILE_CACHE: '1', ...env }).filter(
      ([, value]) => value !== undefined,
    ),
  );
}

/**
 * Runs `orq ARGS` as its own process and waits for it to exit. `preload`: modules Node imports
 * before the CLI (`--import`), such as a module hook.
 */
export function orq(
  args: string[],
  options: {
    env?: Record<string, string | undefined>;
    cwd?: string;
    timeoutMs?: number;
    preload?: string[];
  } = {},
): Promise<CliResult> {
  const preload = (options.preload ?? []).flatMap((module) => ['--import', module]);
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [...preload, cliMain(), ...args],
      {
        cwd: options.cwd ?? root,
        env: cleanEnv(options.env ?? {}),
        timeout: options.timeoutMs ?? 60_000,
      },
      (error, stdout, stderr) => {
        const code = error ? (typeof error.code === 'number' ? error.code : 1) : 0;
        resolve({ code, stdout, stderr });
      },
    );
  });
}

/** Starts a long-running `orq ARGS` (e.g. `start --roles worker`) and returns the child. */
export function spawnOrq(
  args: string[],
  options: {
    env?: Record<string, string>;
    cwd?: string;
    /** In a process group of its own, as a terminal's foreground job (signal it as -pid). */
    detached?: boolean;
    /** A pipe the test writes to (`orq submit -`); none by default. */
    stdin?: boolean;
    /** Modules Node imports before the CLI (`--import`), as for `orq`. */
    preload?: string[];
  } = {},
): ChildProcess {
  const preload = (options.preload ?? []).flatMap((module) => ['--import', module]);
  return spawn(process.execPath, [...preload, cliMain(), ...args], {
    cwd: options.cwd ?? root,
    env: cleanEnv(options.env ?? {}),
    stdio: [options.stdin ? 'pipe' : 'ignore', 'pipe', 'pipe'],
    detached: options.detached ?? false,
  });
}

/** Resolves when the child's output contains `text` (pino logs 'roles started' when ready). */
export function waitForOutput(
  child: ChildProcess,
  text: string,
  timeoutMs = 20_000,
): Promise<void> {
  return new Promise((resolve, reject) => {
    let seen = '';
    const timer = setTimeout(
      () => reject(new Error(`no "${text}" within ${timeoutMs}ms:\n${seen}`)),
      timeoutMs,
    );
    const onData = (chunk: Buffer) => {
      seen += chunk.toString();
      if (seen.includes(text)) {
        clearTimeout(timer);
        resolve();
      }
    };
    child.stdout?.on('data', onData);
    child.stderr?.on('data', onData);
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`process exited (${code}) before "${text}":\n${seen}`));
    });
  });
}

export async function stopProcess(
  child: ChildProcess,
  signal: NodeJS.Signals = 'SIGTERM',
): Promise<number | null> {
  // Ended already (by an exit or a signal): its 'exit' event is gone.
  if (child.exitCode !== null || child.signalCode !== null) return child.exitCode;
  return new Promise((resolve) => {
    child.once('exit', (code) => resolve(code));
    child.kill(signal);
    setTimeout(() => child.kill('SIGKILL'), 15_000).unref();
  });
}
