import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';

/** How a child process ended, with its captured output (stdout and stderr interleaved). */
export interface ProcessOutcome {
  /** null when the process was killed or never started. */
  exitCode: number | null;
  timedOut: boolean;
  aborted: boolean;
  /** The last `maxOutputBytes` of the output; a note says how much was cut off before it. */
  output: string;
  truncatedBytes: number;
  durationMs: number;
  /** The process could not be started (e.g. ENOENT). */
  spawnError?: string;
}

export interface RunProcessOptions {
  cwd: string;
  timeoutMs: number;
  maxOutputBytes: number;
  env: NodeJS.ProcessEnv;
  signal?: AbortSignal;
  /** Told the pid of the started process, which leads a process group of its own. */
  onSpawn?: (pid: number) => void;
  /** Told each chunk of output as it arrives (stdout and stderr alike). */
  onOutput?: (chunk: Buffer) => void;
}

/** Keeps the last `max` bytes written to it: the tail of a log is what tells how a run ended. */
export class TailBuffer {
  private chunks: Buffer[] = [];
  private size = 0;
  private dropped = 0;

  constructor(private readonly max: number) {}

  push(chunk: Buffer): void {
    this.chunks.push(chunk);
    this.size += chunk.length;
    while (this.chunks.length > 1 && this.size - (this.chunks[0]?.length ?? 0) >= this.max) {
      const first = this.chunks.shift() as Buffer;
      this.size -= first.length;
      this.dropped += first.length;
    }
  }

  get truncatedBytes(): number {
    return this.dropped + Math.max(0, this.size - this.max);
  }

  toString(): string {
    const all = Buffer.concat(this.chunks);
    const kept = all.length > this.max ? all.subarray(all.length - this.max) : all;
    const text = kept.toString('utf8');
    return this.truncatedBytes > 0
      ? `[... ${this.truncatedBytes} bytes of earlier output cut off ...]\n${text}`
      : text;
  }
}

/**
 * How long output may still arrive once the process has exited and its group was killed. Only
 * a process that left the group (setsid) can hold the pipes open longer: it must not keep the
 * outcome, and the task, waiting for as long as it runs.
 */
const PIPE_GRACE_MS = 1_000;

/**
 * Runs argv without a shell, in its own process group so a timeout or a cancellation kills
 * everything it started, and captures at most `maxOutputBytes` of its output. Never rejects:
 * a process that cannot start is reported in `spawnError`.
 */
export function runProcess(
  argv: readonly string[],
  options: RunProcessOptions,
): Promise<ProcessOutcome> {
  const started = Date.now();
  const [program, ...args] = argv;
  const buffer = new TailBuffer(options.maxOutputBytes);
  return new Promise((resolve) => {
    let timedOut = false;
    let aborted = false;
    let settled = false;
    /** Undefined while the process runs; its exit code (null: killed) once it exited. */
    let exitCode: number | null | undefined;
    let grace: NodeJS.Timeout | undefined;
    const finish = (spawnError?: string) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      clearTimeout(grace);
      options.signal?.removeEventListener('abort', onAbort);
      resolve({
        exitCode: timedOut || aborted ? null : (exitCode ?? null),
        timedOut,
        aborted,
        output: buffer.toString(),
        truncatedBytes: buffer.truncatedBytes,
        durationMs: Date.now() - started,
        ...(spawnError ? { spawnError } : {}),
      });
    };
    if (!program) {
      finish('empty command');
      return;
    }
    const child = spawn(program, args, {
      cwd: options.cwd,
      env: options.env,
      stdio: ['ignore', 'pipe', 'pipe'],
      detached: true,
    });
    if (child.pid !== undefined) options.onSpawn?.(child.pid);
    const killGroup = () => {
      if (child.pid === undefined) return;
      try {
        process.kill(-child.pid, 'SIGKILL');
      } catch {
        // The group is already gone.
      }
    };
    // Once the process exited, a timeout or a cancel has nothing left to kill: the outcome is
    // its own exit, reported when the pipes close or the grace ends.
    const onAbort = () => {
      if (exitCode !== undefined) return;
      aborted = true;
      killGroup();
    };
    const timer = setTimeout(() => {
      if (exitCode !== undefined) return;
      timedOut = true;
      killGroup();
    }, options.timeoutMs);
    if (options.signal?.aborted) onAbort();
    else options.signal?.addEventListener('abort', onAbort, { once: true });
    const onData = (chunk: Buffer) => {
      buffer.push(chunk);
      options.onOutput?.(chunk);
    };
    child.stdout.on('data', onData);
    child.stderr.on('data', onData);
    child.on('error', (error) => finish(spawnFailure(error, options.cwd)));
    child.on('exit', (code) => {
      exitCode = code;
      // Whatever the command left running in its group goes with it, so nothing outlives
      // the task; what left the group cannot hold the outcome past the grace.
      killGroup();
      grace = setTimeout(() => {
        child.stdout.destroy();
        child.stderr.destroy();
        finish();
      }, PIPE_GRACE_MS);
    });
    child.on('close', () => finish());
  });
}

/**
 * Why a process could not start. spawn says ENOENT both for a program not on PATH and for a
 * working directory that is gone (removed while the task ran): say which.
 */
function spawnFailure(error: Error, cwd: string): string {
  const missingFolder = (error as { code?: unknown }).code === 'ENOENT' && !existsSync(cwd);
  return missingFolder
    ? `its working directory ${cwd} does not exist (${error.message})`
    : error.message;
}

/** One line saying how a process ended, for logs and tool observations. */
export function describeOutcome(outcome: ProcessOutcome, timeoutMs: number): string {
  if (outcome.spawnError) return `could not start: ${outcome.spawnError}`;
  if (outcome.timedOut) return `timed out after ${Math.round(timeoutMs / 1000)}s and was killed`;
  if (outcome.aborted) return 'cancelled';
  return `exit code ${outcome.exitCode ?? 'none'}`;
}

/**
 * orq's own credentials in a pod's environment: Redis (its URL may hold the password), the API
 * and operator tokens, and the trace exporter's headers (Langfuse's keys travel there).
 */
const POD_SECRETS =
  /^(REDIS_URL|ORQ_API_TOKEN|ORQ_OPERATOR_TOKEN|ORQ__redis__.*|OTEL_EXPORTER_OTLP(_TRACES|_METRICS|_LOGS)?_HEADERS)$/;

/**
 * The pod's environment without orq's own credentials, for the agent CLI of the command
 * executor: it runs what a model asks, so it gets the tools' setup (PATH, proxies, git and
 * language settings) but nothing that reaches Redis, the API or the trace backend. Provider keys
 * left the environment at the pod's start (provider-keys.ts).
 */
export function withoutPodSecrets(env: NodeJS.ProcessEnv = process.env): NodeJS.ProcessEnv {
  return Object.fromEntries(Object.entries(env).filter(([name]) => !POD_SECRETS.test(name)));
}

/**
 * The environment for commands a model chooses (run_command): enough to run tools, none of
 * the pod's secrets (API keys, REDIS_URL) a model could read back with `env`.
 */
export function minimalEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const keep = ['PATH', 'HOME', 'LANG', 'LC_ALL', 'TERM', 'TMPDIR', 'TZ', 'SystemRoot'];
  const env: NodeJS.ProcessEnv = {};
  for (const key of keep) if (process.env[key] !== undefined) env[key] = process.env[key];
  return { ...env, ...extra };
}
