import { execFile } from 'node:child_process';
import {
  cpSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  symlinkSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join, posix } from 'node:path';
import { promisify } from 'node:util';

// No Docker engine runs where the tests run. This replays a Dockerfile's stages on the local
// disk instead: each stage's filesystem root is a temporary directory, COPY and WORKDIR do what
// they do in Docker, and the few RUN steps orq's Dockerfile uses are mapped to local actions.
// It catches what a real build would: a file the build needs but the Dockerfile does not copy,
// a source the .dockerignore leaves out of the context, an ENTRYPOINT that is not built.

const run = promisify(execFile);

export interface DockerInstruction {
  /** Index of the stage (FROM) the instruction belongs to. */
  stage: number;
  keyword: string;
  args: string;
}

/** The Dockerfile's instructions, continuation lines joined, comments dropped. */
export function parseDockerfile(text: string): DockerInstruction[] {
  let stage = -1;
  return text
    .replace(/\\\n/g, ' ')
    .split('\n')
    .map((line) => line.trim())
    .filter((line) => line && !line.startsWith('#'))
    .map((line) => {
      const [keyword = '', ...rest] = line.split(/\s+/);
      if (keyword.toUpperCase() === 'FROM') stage += 1;
      return { stage, keyword: keyword.toUpperCase(), args: rest.join(' ') };
    });
}

/** Top-level patterns of a .dockerignore (orq's uses names and `*.ext` / `name.*` globs). */
export function readDockerignore(path: string): string[] {
  return readFileSync(path, 'utf8')
    .split('\n')
    .map((line) => line.trim())
    .filter((line) => line && !line.startsWith('#'));
}

function isIgnored(name: string, patterns: readonly string[]): boolean {
  const top = name.replace(/^\.\//, '').split('/')[0] ?? '';
  return patterns.some((pattern) => {
    const regex = new RegExp(
      `^${pattern.replace(/[.+^${}()|[\]\\]/g, '\\$&').replace(/\*/g, '[^/]*')}$`,
    );
    return regex.test(top);
  });
}

export interface ImageStage {
  name: string | undefined;
  /** The stage's filesystem root on the local disk. */
  root: string;
  /** Its WORKDIR, as a path inside the stage. */
  workdir: string;
}

export interface DryBuildOptions {
  /** The build context (the repository). */
  context: string;
  dockerfile: string;
  dockerignore: string;
  /** Stands in for `npm ci`: linked into the stage instead of installed. */
  nodeModules: string;
}

/**
 * Replays the Dockerfile. Supported: FROM [AS name], WORKDIR, COPY [--from=stage] [--chown=…],
 * RUN made of `npm ci …`, `npm run <script>` and `npm prune …` joined by `&&` (anything else
 * throws, so a new step is noticed), and ENV/USER/ENTRYPOINT/CMD (no effect on files).
 */
export async function dryBuild(options: DryBuildOptions): Promise<ImageStage[]> {
  const stages: ImageStage[] = [];
  try {
    await replay(options, stages);
    return stages;
  } catch (error) {
    for (const stage of stages) rmSync(stage.root, { recursive: true, force: true });
    throw error;
  }
}

async function replay(options: DryBuildOptions, stages: ImageStage[]): Promise<void> {
  const ignored = readDockerignore(options.dockerignore);
  const inStage = (stage: ImageStage, path: string) =>
    join(stage.root, posix.resolve(stage.workdir, path));

  for (const instruction of parseDockerfile(readFileSync(options.dockerfile, 'utf8'))) {
    const { keyword, args } = instruction;
    if (keyword === 'FROM') {
      const name = /\bAS\s+(\S+)$/i.exec(args)?.[1];
      stages.push({ name, root: mkdtempSync(join(tmpdir(), 'orq-image-')), workdir: '/' });
      continue;
    }
    const stage = stages.at(-1);
    if (!stage) throw new Error(`${keyword} before FROM`);
    switch (keyword) {
      case 'WORKDIR':
        stage.workdir = posix.resolve(stage.workdir, args);
        mkdirSync(inStage(stage, '.'), { recursive: true });
        break;
      case 'COPY': {
        const words = args.split(/\s+/);
        const from = words.find((w) => w.startsWith('--from='))?.slice('--from='.length);
        const paths = words.filter((w) => !w.startsWith('--'));
        const dest = paths.pop()!;
        const source = from ? stages.find((s) => s.name === from) : undefined;
        if (from && !source) throw new Error(`COPY --from=${from}: no such stage`);
        for (const path of paths) {
          if (!source && isIgnored(path, ignored)) {
            throw new Error(`COPY ${path}: left out of the build context by .dockerignore`);
          }
          const origin = source ? join(source.root, path) : join(options.context, path);
          if (!existsSync(origin)) throw new Error(`COPY ${path}: not found`);
          const target =
            dest.endsWith('/') || paths.length > 1
              ? join(inStage(stage, dest), basename(path))
              : inStage(stage, dest);
          mkdirSync(join(target, '..'), { recursive: true });
          // node_modules is linked, not copied: it is the stand-in for `npm ci` anyway.
          if (basename(path) === 'node_modules') symlinkSync(options.nodeModules, target);
          else cpSync(origin, target, { recursive: true });
        }
        break;
      }
      case 'RUN':
        for (const step of args.split('&&').map((s) => s.trim())) {
          const cwd = inStage(stage, '.');
          if (/^npm ci\b/.test(step)) {
            if (!existsSync(join(cwd, 'package-lock.json'))) {
              throw new Error('npm ci without package-lock.json');
            }
            symlinkSync(options.nodeModules, join(cwd, 'node_modules'));
          } else if (/^npm run \S+$/.test(step)) {
            await run('npm', ['run', step.split(' ')[2]!], { cwd });
          } else if (!/^npm prune\b/.test(step)) {
            throw new Error(`RUN step the dry build does not know: ${step}`);
          }
        }
        break;
      case 'ENV':
      case 'USER':
      case 'ENTRYPOINT':
      case 'CMD':
        break;
      default:
        throw new Error(`Dockerfile instruction the dry build does not know: ${keyword}`);
    }
  }
}
