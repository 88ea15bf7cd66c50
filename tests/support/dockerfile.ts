import { execFile } from 'node:child_process';
import {
  cpSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  symlinkSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join, posix } from 'node:path';
import { promisify } from 'node:util';
import { z } from 'zod';

// No registry is reachable where CI runs, so orq's image (FROM node:24-slim) cannot be built
// there. This replays a Dockerfile's stages on the local disk instead: each stage's filesystem root is a temporary directory, COPY and WORKDIR do what
// they do in Docker, and the few RUN steps orq's Dockerfile uses are mapped to local actions.
// It catches what a real build would: a file the build needs but the Dockerfile does not copy,
// a source the .dockerignore leaves out of the context, an ENTRYPOINT that is not built.
// Files on the local disk all belong to whoever runs the tests, so ownership is kept on the side
// (COPY --chown, RUN chown, USER) and writableBy says whether the image's user could write a path.

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
  /** Its USER (the name, without a group); root until a USER instruction. */
  user: string;
  /** Its ENV, as a container started from it gets it. */
  env: Record<string, string>;
  /** Its VOLUME paths. */
  volumes: string[];
  /** The Debian packages its RUN steps install (`apt-get install`); not installed locally. */
  packages: string[];
  /**
   * Owners set by COPY --chown and RUN chown, by path inside the stage; `recursive` when the
   * files below it were given the same owner. Every other path belongs to root.
   */
  owners: Map<string, { user: string; recursive: boolean }>;
}

const isRoot = (user: string) => user === 'root' || user === '0';

/** The owner of `path` (inside the stage), as far as the replay knows: root unless chowned. */
export function ownerOf(stage: ImageStage, path: string): string {
  const own = stage.owners.get(path);
  if (own) return own.user;
  for (let dir = posix.dirname(path); ; dir = posix.dirname(dir)) {
    const parent = stage.owners.get(dir);
    if (parent?.recursive) return parent.user;
    if (dir === '/') return 'root';
  }
}

/**
 * Whether the stage's USER can create `path` (inside the stage, absolute) with `mkdir -p`: it
 * exists and is theirs, or its nearest existing ancestor is theirs. Mode bits are not replayed
 * (the Dockerfile has no chmod; such a RUN step throws): a directory is writable by its owner.
 */
export function writableBy(stage: ImageStage, path: string): boolean {
  if (isRoot(stage.user)) return true;
  let existing = posix.resolve(path);
  while (existing !== '/' && !existsSync(join(stage.root, existing))) {
    existing = posix.dirname(existing);
  }
  return ownerOf(stage, existing) === stage.user;
}

/** `A=1 B="two words"` or the older `A value` form of ENV. */
function parseEnv(args: string): Record<string, string> {
  const unquote = (v: string) => v.replace(/^"(.*)"$/, '$1').replace(/^'(.*)'$/, '$1');
  const pairs = [...args.matchAll(/(\w+)=("[^"]*"|'[^']*'|\S*)/g)];
  if (pairs.length > 0) return Object.fromEntries(pairs.map(([, k, v]) => [k!, unquote(v!)]));
  const [key = '', ...value] = args.split(/\s+/);
  return { [key]: unquote(value.join(' ')) };
}

/** `VOLUME ["/a", "/b"]` or `VOLUME /a /b`. */
function parseVolumes(args: string): string[] {
  return args.startsWith('[') ? z.array(z.string()).parse(JSON.parse(args)) : args.split(/\s+/);
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
 * RUN made of `npm ci …`, `npm run <script>`, `npm prune …`, `mkdir [-p] <dirs>` and
 * `chown [-R] <user>[:<group>] <paths>`, `apt-get update`, `apt-get install <options> <packages>`
 * (recorded on the stage, as root only) and `rm -rf <paths>` joined by `&&` (anything else throws, so a new step is
 * noticed; a mkdir or chown under a declared VOLUME throws too, since Docker discards it),
 * ENV, USER and VOLUME (recorded on the stage), and ENTRYPOINT/CMD (no effect on files).
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
  /** A RUN step's paths, inside the stage; Docker discards changes under a declared VOLUME. */
  const runPaths = (stage: ImageStage, step: string, paths: string[]) =>
    paths.map((path) => {
      const absolute = posix.resolve(stage.workdir, path);
      const volume = stage.volumes.find((v) => absolute === v || absolute.startsWith(`${v}/`));
      if (volume) throw new Error(`${step}: changes ${volume} after VOLUME, which Docker discards`);
      return absolute;
    });

  for (const instruction of parseDockerfile(readFileSync(options.dockerfile, 'utf8'))) {
    const { keyword, args } = instruction;
    if (keyword === 'FROM') {
      const name = /\bAS\s+(\S+)$/i.exec(args)?.[1];
      stages.push({
        name,
        root: mkdtempSync(join(tmpdir(), 'orq-image-')),
        workdir: '/',
        user: 'root',
        env: {},
        volumes: [],
        packages: [],
        owners: new Map(),
      });
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
        const chown = words.find((w) => w.startsWith('--chown='))?.slice('--chown='.length);
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
          if (chown) {
            const inside = posix.normalize(target.slice(stage.root.length));
            stage.owners.set(inside, { user: chown.split(':')[0]!, recursive: true });
          }
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
          } else if (/^mkdir\s/.test(step)) {
            const words = step.split(/\s+/).slice(1);
            const paths = words.filter((w) => !w.startsWith('-'));
            const parents = words.includes('-p');
            for (const path of runPaths(stage, step, paths)) {
              // After USER, RUN runs as that user: a directory it cannot write stops the build.
              if (!writableBy(stage, path)) {
                throw new Error(`${step}: permission denied for ${stage.user} on ${path}`);
              }
              // With -p, the first directory it created (none when all existed); else `path`.
              const created = mkdirSync(join(stage.root, path), { recursive: parents });
              const first = parents
                ? created && posix.normalize(created.slice(stage.root.length))
                : path;
              if (first && !isRoot(stage.user)) {
                stage.owners.set(first, { user: stage.user, recursive: true });
              }
            }
          } else if (/^chown\s/.test(step)) {
            const words = step.split(/\s+/).slice(1);
            const recursive = words.includes('-R');
            const [owner, ...paths] = words.filter((w) => !w.startsWith('-'));
            if (!owner || paths.length === 0) throw new Error(`${step}: owner and paths expected`);
            if (!isRoot(stage.user)) throw new Error(`${step}: only root may chown`);
            for (const path of runPaths(stage, step, paths)) {
              if (!existsSync(join(stage.root, path))) throw new Error(`${step}: no ${path}`);
              if (recursive) {
                for (const below of stage.owners.keys()) {
                  if (below.startsWith(`${path}/`)) stage.owners.delete(below);
                }
              }
              stage.owners.set(path, { user: owner.split(':')[0]!, recursive });
            }
          } else if (/^apt-get install\s/.test(step)) {
            if (!isRoot(stage.user)) throw new Error(`${step}: only root may install packages`);
            const words = step.split(/\s+/).slice(2);
            stage.packages.push(...words.filter((w) => !w.startsWith('-')));
          } else if (/^rm -rf\s/.test(step)) {
            for (const path of runPaths(stage, step, step.split(/\s+/).slice(2))) {
              // `<folder>/*` (apt's lists): what the folder holds, the only glob supported.
              const folder = join(stage.root, path.replace(/\/\*$/, ''));
              const targets = !path.endsWith('/*')
                ? [folder]
                : existsSync(folder)
                  ? readdirSync(folder).map((name) => join(folder, name))
                  : [];
              for (const target of targets) rmSync(target, { recursive: true, force: true });
            }
          } else if (!/^npm prune\b/.test(step) && step !== 'apt-get update') {
            throw new Error(`RUN step the dry build does not know: ${step}`);
          }
        }
        break;
      case 'ENV':
        Object.assign(stage.env, parseEnv(args));
        break;
      case 'USER':
        stage.user = args.split(':')[0]!;
        break;
      case 'VOLUME':
        stage.volumes.push(...parseVolumes(args).map((v) => posix.resolve(stage.workdir, v)));
        break;
      case 'ENTRYPOINT':
      case 'CMD':
        break;
      default:
        throw new Error(`Dockerfile instruction the dry build does not know: ${keyword}`);
    }
  }
}
