import { spawn, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

/** The repository root (bench/lib/../..). */
export const repoRoot = fileURLToPath(new URL('../..', import.meta.url));
const cliMain = join(repoRoot, 'src/producers/cli/main.ts');
// Absolute loader URL, so the child runs the TypeScript sources without a build.
const tsxLoader = pathToFileURL(join(repoRoot, 'node_modules/tsx/dist/loader.mjs')).href;

/** The environment without the machine's orq or Redis settings, plus `env`. */
export function benchEnv(env: Record<string, string> = {}): NodeJS.ProcessEnv {
  const base = Object.fromEntries(
    Object.entries(process.env).filter(([k]) => !k.startsWith('ORQ') && k !== 'REDIS_URL'),
  );
  return { ...base, ...env };
}

export interface OrqPod {
  child: ChildProcess;
  /** Resolves once the pod logged "roles started". */
  ready: Promise<void>;
  stop(): Promise<void>;
}

/** `orq start ARGS` as a child process against the bench Redis under `prefix`. */
export function spawnOrqStart(args: string[], redisUrl: string, prefix: string): OrqPod {
  const child = spawn(process.execPath, ['--import', tsxLoader, cliMain, 'start', ...args], {
    cwd: repoRoot,
    env: benchEnv({ REDIS_URL: redisUrl, ORQ_PREFIX: prefix, ORQ_LOG_LEVEL: 'info' }),
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let seen = '';
  const ready = new Promise<void>((resolve, reject) => {
    const timer = setTimeout(
      () => reject(new Error(`orq start ${args.join(' ')}: not ready within 60s\n${seen}`)),
      60_000,
    );
    const onData = (chunk: Buffer) => {
      // Keep only the tail: a pod that logs a lot must not grow this string without bound.
      seen = (seen + chunk.toString()).slice(-20_000);
      if (seen.includes('roles started')) {
        clearTimeout(timer);
        resolve();
      }
    };
    child.stdout?.on('data', onData);
    child.stderr?.on('data', onData);
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`orq start exited (${code}) before it was ready:\n${seen}`));
    });
  });
  ready.catch(() => undefined);
  return {
    child,
    ready,
    stop: () =>
      new Promise<void>((resolve) => {
        if (child.exitCode !== null || child.signalCode !== null) return resolve();
        child.once('exit', () => resolve());
        child.kill('SIGTERM');
        setTimeout(() => child.kill('SIGKILL'), 10_000).unref();
      }),
  };
}

/** Stops `pods` and drops them from the scenario context's set (`started`). */
export async function stopPods(pods: readonly OrqPod[], started: Set<OrqPod>): Promise<void> {
  await Promise.all(pods.map((p) => p.stop()));
  for (const p of pods) started.delete(p);
}
