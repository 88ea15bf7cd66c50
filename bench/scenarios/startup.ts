import { execFile, spawn, spawnSync } from 'node:child_process';
import { existsSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import type { BenchContext, BenchScenario } from '../lib/context.js';
import { benchEnv, repoRoot } from '../lib/processes.js';
import { log } from '../lib/report.js';
import { median } from '../lib/stats.js';
import { now } from '../lib/timing.js';

const cli = join(repoRoot, 'dist/producers/cli/main.js');

/** The newest modification time of the files under `dir`, in ms. */
function newestMtime(dir: string): number {
  let newest = 0;
  for (const path of readdirSync(dir, { recursive: true, encoding: 'utf8' })) {
    const stat = statSync(join(dir, path));
    if (stat.isFile()) newest = Math.max(newest, stat.mtimeMs);
  }
  return newest;
}

/** True when `npm run build` ran after the last change under src/ (a build rewrites main.js). */
function distIsFresh(): boolean {
  return existsSync(cli) && statSync(cli).mtimeMs > newestMtime(join(repoRoot, 'src'));
}

interface Command {
  name: string;
  args: string[];
  note: string;
  /** A long-running command is timed until this text appears in its output, then stopped. */
  readyText?: string;
}

/** Wall time of one process from spawn to exit, in ms; a non-zero exit fails the scenario. */
function timeProcess(args: string[], env: NodeJS.ProcessEnv): Promise<number> {
  const started = now();
  return new Promise((resolve, reject) =>
    execFile(process.execPath, args, { cwd: repoRoot, env, timeout: 60_000 }, (error, _out, err) =>
      error
        ? reject(new Error(`node ${args.join(' ')}: ${error.message}\n${err}`))
        : resolve(now() - started),
    ),
  );
}

/** Wall time from spawn until the process writes `text`, in ms; then it is stopped (SIGTERM). */
function timeUntilOutput(args: string[], env: NodeJS.ProcessEnv, text: string): Promise<number> {
  const started = now();
  const child = spawn(process.execPath, args, {
    cwd: repoRoot,
    env,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  return new Promise((resolve, reject) => {
    let seen = '';
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`node ${args.join(' ')}: no "${text}" within 60 s\n${seen}`));
    }, 60_000);
    const onData = (chunk: Buffer) => {
      seen += chunk.toString();
      if (!seen.includes(text)) return;
      const ms = now() - started;
      clearTimeout(timer);
      child.stdout.off('data', onData);
      child.stderr.off('data', onData);
      child.once('exit', () => resolve(ms));
      child.kill('SIGTERM');
    };
    child.stdout.on('data', onData);
    child.stderr.on('data', onData);
    child.once('error', reject);
    child.once('exit', (code) => {
      clearTimeout(timer);
      if (!seen.includes(text))
        reject(new Error(`node ${args.join(' ')} exited (${code}) before "${text}"\n${seen}`));
    });
  });
}

/**
 * 6. Start-up: how long a CLI command takes from spawn to exit, as users run it (the compiled
 * `dist/`, built here first), against bare Node and against a process that only imports
 * BullMQ, the floor of any command that talks to the queues; and a pod (`orq start`) from spawn
 * until it takes jobs. Every command starts a process, and so does every pod a cluster scales
 * out with; what the CLI loads at start, each of them pays.
 */
async function run(ctx: BenchContext): Promise<void> {
  if (distIsFresh()) {
    log('start-up is measured on the compiled CLI: dist/ is newer than src/');
  } else {
    log('building dist/ (npm run build): start-up is measured on the compiled CLI');
    const build = spawnSync('npm', ['run', 'build'], { cwd: repoRoot, encoding: 'utf8' });
    if (build.status !== 0)
      throw new Error(`npm run build failed:\n${build.stdout}${build.stderr}`);
  }

  const env = benchEnv();
  const orqEnv = benchEnv({ REDIS_URL: ctx.redis.url, ORQ_PREFIX: 'bench-startup' });
  const commands: Command[] = [
    { name: 'node', args: ['-e', ''], note: 'bare Node: node -e ""' },
    {
      name: 'bullmq_import',
      args: ['--input-type=module', '-e', "await import('bullmq')"],
      note: 'a process that only imports BullMQ',
    },
    { name: 'orq_version', args: [cli, '--version'], note: 'orq --version' },
    {
      name: 'orq_status',
      args: [cli, 'status'],
      note: 'orq status on the bench Redis (no sessions)',
    },
    {
      name: 'orq_start_ready',
      args: [cli, 'start', '--roles', 'worker,judge'],
      note: 'orq start --roles worker,judge until it logs "roles started" (then stopped)',
      readyText: 'roles started',
    },
  ];
  const rounds = ctx.quick ? 5 : 15;
  const samples = new Map<string, number[]>(commands.map((c) => [c.name, []]));
  // One discarded round (disk cache), then rounds that alternate the commands.
  for (let round = -1; round < rounds; round += 1) {
    for (const command of commands) {
      const commandEnv = command.name.startsWith('orq') ? orqEnv : env;
      const ms = command.readyText
        ? await timeUntilOutput(
            command.args,
            { ...commandEnv, ORQ_LOG_LEVEL: 'info' },
            command.readyText,
          )
        : await timeProcess(command.args, commandEnv);
      if (round >= 0) samples.get(command.name)?.push(ms);
    }
  }
  const ms = (name: string) => median(samples.get(name) ?? []);
  for (const command of commands) {
    ctx.reporter.record({
      name: `startup.${command.name}_ms`,
      value: ms(command.name),
      unit: 'ms',
      note: `median wall time from spawn to ${command.readyText ? 'ready' : 'exit'}: ${command.note}`,
      rounds,
      ...(command.name.startsWith('orq')
        ? {
            vs_node: ms(command.name) / ms('node'),
            vs_bullmq_import: ms(command.name) / ms('bullmq_import'),
          }
        : {}),
    });
  }
}

export const startup: BenchScenario = {
  name: 'startup',
  description:
    'start-up: orq --version, orq status and an orq start pod against bare Node and a BullMQ import',
  run,
};
