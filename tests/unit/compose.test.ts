import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { existsSync, readFileSync, rmSync } from 'node:fs';
import { freePort } from '../../src/shared/redis-server.js';
import { join, posix } from 'node:path';
import { promisify } from 'node:util';
import { createRequire } from 'node:module';
import { afterAll, describe, expect, inject, it } from 'vitest';
import { parse } from 'yaml';
import { z } from 'zod';
import { loadConfig } from '../../src/shared/config/load.js';
import { valueAtPath } from '../../src/shared/plain-object.js';
import { Role } from '../../src/shared/queues.js';
import { cleanEnv, root, stopProcess, waitForOutput } from '../support/cli.js';
import { dryBuild, parseDockerfile, writableBy, type ImageStage } from '../support/dockerfile.js';
import { tempFilesPerFile } from '../support/temp-files.js';

// No registry is reachable where CI runs (no node:24-slim to build on): the compose file is
// checked against the parts of the Compose format orq relies on, the Dockerfile is replayed on the local disk
// (tests/support/dockerfile.ts), and each service's command runs as a plain process with the
// replayed image's ENTRYPOINT, against the test Redis.

const run = promisify(execFile);
const semver = createRequire(import.meta.url)('semver') as {
  satisfies(version: string, range: string): boolean;
};
const ROLE_SERVICES = Role.options;
const REDIS_SERVICE = 'redis';

const Command = z.array(z.string()).min(1);
/** `KEY: value`; a null value passes the variable through from the host when it is set there. */
const Environment = z.record(z.string(), z.union([z.string(), z.number(), z.null()]));

/** `--flag value` pairs of an argv. */
function flag(argv: readonly string[], name: string): string | undefined {
  const index = argv.indexOf(name);
  return index >= 0 ? argv[index + 1] : undefined;
}

const RedisService = z.object({
  image: z.string().regex(/^redis:7(\.|-|$)/, 'the redis:7 image'),
  command: Command.refine(
    (c) => flag(c, '--appendonly') === 'yes',
    'AOF on: --appendonly yes',
  ).refine((c) => flag(c, '--maxmemory-policy') === 'noeviction', '--maxmemory-policy noeviction'),
  volumes: z
    .array(z.string())
    .refine((v) => v.some((m) => m.endsWith(':/data')), 'a volume on /data keeps the AOF'),
  healthcheck: z.object({
    test: z
      .array(z.string())
      .refine((t) => t.includes('redis-cli') && t.includes('ping'), 'redis-cli ping'),
  }),
});

const OrqService = z.object({
  build: z.union([z.literal('.'), z.object({ context: z.literal('.') })]),
  command: Command,
  depends_on: z.object({
    [REDIS_SERVICE]: z.object({ condition: z.literal('service_healthy') }),
  }),
  environment: Environment.refine((env) => {
    const url = new URL(String(env.REDIS_URL));
    return url.protocol === 'redis:' && url.hostname === REDIS_SERVICE && url.port === '6379';
  }, `REDIS_URL points at the ${REDIS_SERVICE} service`),
  /** Short syntax, `source:target[:mode]`. */
  volumes: z.array(z.string()).optional(),
});

/** A `CMD node -e <script>` healthcheck that fetches `url`. */
const NodeProbe = (url: string) =>
  z.object({
    test: z
      .array(z.string())
      .refine(
        (t) => t[0] === 'CMD' && t[1] === 'node' && t[2] === '-e' && t[3]?.includes(url),
        `node -e fetch of ${url}`,
      ),
  });

/**
 * `start --roles <role> --metrics-port 9464`, a healthcheck on that port's /readyz, and nothing
 * that pins a container (so `--scale` works).
 */
const roleService = (role: Role) =>
  OrqService.extend({
    command: Command.refine(
      (c) => c[0] === 'start' && flag(c, '--roles') === role,
      `command starts the ${role} role`,
    ).refine((c) => flag(c, '--metrics-port') === '9464', 'probes on --metrics-port 9464'),
    healthcheck: NodeProbe('http://127.0.0.1:9464/readyz'),
    // Longer than `orq start`'s default --shutdown-timeout (30 s), or Docker kills active jobs.
    stop_grace_period: z
      .string()
      .regex(/^\d+s$/)
      .refine((v) => Number.parseInt(v, 10) > 30, 'stop_grace_period above 30s'),
    container_name: z.never({ error: 'a fixed container_name prevents --scale' }).optional(),
    ports: z.never({ error: 'a published port prevents --scale' }).optional(),
  });

const DashboardService = OrqService.extend({
  healthcheck: NodeProbe('http://127.0.0.1:3000/readyz'),
  command: Command.refine(
    (c) => c[0] === 'dashboard' && flag(c, '--host') === '0.0.0.0' && flag(c, '--port') === '3000',
    'dashboard --host 0.0.0.0 --port 3000',
  ),
  environment: OrqService.shape.environment.refine(
    (env) => /^\$\{ORQ_API_TOKEN:\?.+\}$/.test(String(env.ORQ_API_TOKEN)),
    'ORQ_API_TOKEN is required (${ORQ_API_TOKEN:?…}): the dashboard listens on 0.0.0.0',
  ),
  ports: z
    .array(z.string())
    .refine((p) => p.some((m) => m.endsWith(':3000')), 'publishes port 3000'),
});

const ComposeFile = z.object({
  services: z.looseObject({
    [REDIS_SERVICE]: RedisService,
    planner: roleService('planner'),
    judge: roleService('judge'),
    worker: roleService('worker'),
    replanner: roleService('replanner'),
    coordinator: roleService('coordinator'),
    dashboard: DashboardService,
  }),
  volumes: z.record(z.string(), z.unknown()),
});
type ComposeFile = z.infer<typeof ComposeFile>;

const composeText = readFileSync(join(root, 'docker-compose.yml'), 'utf8');
const dockerfile = readFileSync(join(root, 'Dockerfile'), 'utf8');

function loadCompose(): ComposeFile {
  // Compose resolves YAML merge keys (`<<: *orq`), as the yaml package does with merge: true.
  return ComposeFile.parse(parse(composeText, { merge: true }));
}

/** Compose's `${NAME:-default}` / `${NAME:?message}` / `${NAME}` with nothing set on the host. */
function interpolate(value: string): string {
  return value.replace(
    /\$\{(\w+)(?::([-?])([^}]*))?\}/g,
    (_, name: string, op?: string, arg?: string) =>
      op === '-' ? (arg ?? '') : op === '?' ? `test-${name.toLowerCase()}` : '',
  );
}

/** The environment a service's container gets, as plain strings (pass-through ones left out). */
function containerEnv(environment: Record<string, string | number | null>): Record<string, string> {
  return Object.fromEntries(
    Object.entries(environment).flatMap(([name, value]) =>
      value === null ? [] : [[name, interpolate(String(value))]],
    ),
  );
}

describe('docker-compose.yml', () => {
  it('has Redis with AOF and noeviction, one service per role, and the dashboard', () => {
    const compose = loadCompose();
    expect(Object.keys(compose.services)).toEqual(
      expect.arrayContaining([REDIS_SERVICE, ...ROLE_SERVICES, 'dashboard']),
    );
    // The named volume the redis service mounts is declared.
    const volume = compose.services.redis.volumes.find((m) => m.endsWith(':/data'))!.split(':')[0]!;
    expect(compose.volumes).toHaveProperty(volume);
  });

  it('the worker concurrency variable is a real configuration key', () => {
    const env = containerEnv(loadCompose().services.worker.environment);
    expect(env.ORQ__concurrency__worker).toBe('4');
  });

  it('rejects a file where a role service loses its Redis dependency (the schema can fail)', () => {
    const broken = parse(composeText, { merge: true }) as {
      services: Record<string, Record<string, unknown>>;
    };
    delete broken.services.worker!.depends_on;
    broken.services.judge!.command = ['start', '--roles', 'planner'];
    const result = ComposeFile.safeParse(broken);
    expect(result.success).toBe(false);
    const paths = result.error!.issues.map((i) => i.path.join('.'));
    expect(paths).toEqual(
      expect.arrayContaining(['services.worker.depends_on', 'services.judge.command']),
    );
  });
});

describe('Dockerfile', () => {
  const instructions = parseDockerfile(dockerfile);
  const last = Math.max(...instructions.map((i) => i.stage));
  const final = instructions.filter((i) => i.stage === last);

  it('builds on one node:<LTS>-slim in stages: npm ci, build, prune dev dependencies', () => {
    const froms = instructions.filter((i) => i.keyword === 'FROM');
    expect(froms.length).toBeGreaterThanOrEqual(2);
    const majors = froms.map((from) => /^node:(\d+)-slim\b/.exec(from.args)?.[1]);
    expect(new Set(majors).size).toBe(1);
    const major = Number(majors[0]);
    // An LTS line (even up to 26; every line from 27 on is one), and one package.json accepts.
    expect(major >= 27 || major % 2 === 0).toBe(true);
    const engines = (
      JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as {
        engines: { node: string };
      }
    ).engines.node;
    expect(semver.satisfies(`${major}.0.0`, engines)).toBe(true);
    const runs = instructions.filter((i) => i.keyword === 'RUN').map((i) => i.args);
    expect(runs.some((r) => r.includes('npm ci'))).toBe(true);
    expect(runs.some((r) => r.includes('npm run build'))).toBe(true);
    expect(runs.some((r) => /npm prune --omit=dev/.test(r))).toBe(true);
  });

  it('is the Node `npm run test:node` (and so CI) runs the tests on', async () => {
    const { stdout } = await run(process.execPath, [
      join(root, 'scripts/test-on-node.mjs'),
      '--which',
    ]);
    const from = instructions.find((i) => i.keyword === 'FROM');
    expect(from?.args).toMatch(new RegExp(`^node:${stdout.trim()}-slim\\b`));
  });

  it('runs as a non-root user, with the built CLI as ENTRYPOINT', () => {
    const user = final.filter((i) => i.keyword === 'USER').at(-1);
    expect(user?.args).toBeDefined();
    expect(user!.args).not.toMatch(/^(root|0)(:|$)/);
    expect(entrypoint()).toEqual(['node', 'dist/producers/cli/main.js']);
  });

  it("installs in its runtime stage what the command executor's agents need: git, ca-certificates, bubblewrap", async () => {
    // git: worktrees and commits; ca-certificates: the agent CLIs' HTTPS; bubblewrap: their sandbox.
    // The replay records the packages of `apt-get install` steps run as root.
    expect((await finalStage()).packages).toEqual(
      expect.arrayContaining(['git', 'ca-certificates', 'bubblewrap']),
    );
    // The build stage does not count: only the runtime stage is the image.
    const runtimeRuns = final.filter((i) => i.keyword === 'RUN').map((i) => i.args);
    expect(runtimeRuns.some((r) => /apt-get install .*\bgit\b/.test(r))).toBe(true);
  }, 180_000);

  it('the image replayed from it (npm ci, npm run build, copies) holds the ENTRYPOINT', async () => {
    const app = await image();
    expect(existsSync(join(app, entrypoint()[1]!))).toBe(true);
    // What the build writes besides tsc's output (the prompt templates) made it in too.
    expect(existsSync(join(app, 'dist/workers/llm/prompts'))).toBe(true);
    const { stdout } = await run(process.execPath, [...entrypoint().slice(1), 'start', '--help'], {
      cwd: app,
      env: cleanEnv({}),
    });
    expect(stdout).toMatch(/--roles <list>/);
  }, 180_000);
});

// --- where a container writes --------------------------------------------------------------------

/**
 * The settings naming a directory orq creates and writes (relative ones resolve against the
 * working directory): a task's workspace (agent and command executors), LLM recordings, and
 * the planning history files in jsonl mode.
 */
const WRITTEN_DIRECTORIES = [
  ['execution', 'workspaceRoot'],
  ['llm', 'record', 'path'],
  ['planning', 'history', 'directory'],
] as const;

/** The configuration a container of the image gets: no config file, the image's ENV and `env`. */
function containerConfig(image: ImageStage, env: Record<string, string> = {}) {
  // The replayed WORKDIR holds no orq.config.*, as the image does not.
  return loadConfig({ env: { ...image.env, ...env }, cwd: join(image.root, image.workdir) });
}

/** `setting`'s directory inside the container, resolved against the WORKDIR. */
function writtenDirectory(
  image: ImageStage,
  config: ReturnType<typeof loadConfig>,
  setting: readonly string[],
): string {
  return posix.resolve(image.workdir, String(valueAtPath(config, setting)));
}

const within = (path: string, dir: string) => path === dir || path.startsWith(`${dir}/`);

describe("the image's working data", () => {
  it('every directory orq writes, as the image configures it, can be created by its USER', async () => {
    const image = await finalStage();
    expect(image.user).not.toBe('root');
    const config = containerConfig(image);
    for (const setting of WRITTEN_DIRECTORIES) {
      const dir = writtenDirectory(image, config, setting);
      expect(writableBy(image, dir), `${setting.join('.')}: ${dir} writable by ${image.user}`).toBe(
        true,
      );
    }
    // The executors' `mkdir -p <workspaceRoot>/<session>/<task>`.
    const workspaces = writtenDirectory(image, config, ['execution', 'workspaceRoot']);
    expect(writableBy(image, posix.join(workspaces, 's-1', 't-1'))).toBe(true);
    // The workspaces are a VOLUME: not in the container's layer, kept when it is replaced.
    expect(image.volumes.some((volume) => within(workspaces, volume))).toBe(true);
  }, 180_000);

  it('compose mounts a named volume, owned by the image user, over the workspaces of each worker', async () => {
    const image = await finalStage();
    const compose = loadCompose();
    const orqServices = [...ROLE_SERVICES, 'dashboard'] as const;
    const workers = ROLE_SERVICES.filter((role) =>
      flag(compose.services[role].command, '--roles')?.split(',').includes('worker'),
    );
    expect(workers).toContain('worker');
    for (const name of orqServices) {
      const service = compose.services[name];
      const config = containerConfig(image, containerEnv(service.environment));
      for (const setting of WRITTEN_DIRECTORIES) {
        const dir = writtenDirectory(image, config, setting);
        expect(writableBy(image, dir), `${name}: ${setting.join('.')} (${dir})`).toBe(true);
      }
      if (!(workers as readonly string[]).includes(name)) continue;
      const workspaces = writtenDirectory(image, config, ['execution', 'workspaceRoot']);
      const mount = (service.volumes ?? [])
        .map((volume) => volume.split(':'))
        .find(([, target]) => target !== undefined && within(workspaces, target));
      expect(mount, `${name}: a volume holds ${workspaces}`).toBeDefined();
      const [source, target] = mount!;
      // A named volume (not a host path): Docker fills a new one from the image's mount point,
      // whose owner it keeps, so the image's USER can write it.
      expect(compose.volumes, `${name}: ${source} is a declared volume`).toHaveProperty(source!);
      expect(writableBy(image, target!), `${name}: ${target} owned by ${image.user}`).toBe(true);
    }
  }, 180_000);

  describe('the replay of ownership (the checks above can fail)', () => {
    const temp = tempFilesPerFile('orq-dockerfile-');
    const replayed: ImageStage[][] = [];
    afterAll(() => {
      for (const stage of replayed.flat()) rmSync(stage.root, { recursive: true, force: true });
    });
    const build = async (text: string): Promise<ImageStage> => {
      const stages = await dryBuild({
        context: temp.dir,
        dockerfile: temp.write('Dockerfile', text),
        dockerignore: temp.write('.dockerignore', ''),
        nodeModules: join(root, 'node_modules'),
      });
      replayed.push(stages);
      return stages.at(-1)!;
    };

    it('a root-owned WORKDIR is not writable by USER node; a chowned directory in it is', async () => {
      const bare = await build('FROM node:24-slim\nWORKDIR /app\nUSER node\n');
      expect(writableBy(bare, '/app/.orq/workspaces')).toBe(false);
      const owned = await build(
        'FROM node:24-slim\nWORKDIR /app\nRUN mkdir -p /app/.orq/x && chown node:node /app/.orq\nUSER node\n',
      );
      expect(writableBy(owned, '/app/.orq/workspaces/s/t')).toBe(true);
      expect(writableBy(owned, '/app/.orq/x')).toBe(false); // chown without -R
      expect(writableBy(owned, '/app/planning_history')).toBe(false);
      const recursive = await build(
        'FROM node:24-slim\nENV A=1 B="two words"\nRUN mkdir -p /data/x && chown -R node /data\nUSER node:node\n',
      );
      expect(writableBy(recursive, '/data/x/y')).toBe(true);
      expect(recursive.env).toEqual({ A: '1', B: 'two words' });
    });

    it('a mkdir after USER node in a root-owned directory, or a chown after VOLUME, fails', async () => {
      await expect(
        build('FROM node:24-slim\nWORKDIR /app\nUSER node\nRUN mkdir -p .orq\n'),
      ).rejects.toThrow(/permission denied for node on \/app\/\.orq/);
      await expect(
        build('FROM node:24-slim\nRUN mkdir -p /data\nVOLUME ["/data"]\nRUN chown node /data\n'),
      ).rejects.toThrow(/after VOLUME/);
    });
  });
});

describe('the compose commands, run with the image replayed from the Dockerfile', () => {
  it('every role service starts with its command, passes its healthcheck, and stops on SIGTERM', async () => {
    const compose = loadCompose();
    const prefix = `c${randomUUID().slice(0, 8)}`;
    await Promise.all(
      ROLE_SERVICES.map(async (role) => {
        const service = compose.services[role];
        // Each container has port 9464 to itself; here they share a machine: a free port each.
        const port = await freePort();
        const child = await runInImage(onPort(service.command, '--metrics-port', port), {
          ...containerEnv(service.environment),
          REDIS_URL: inject('redisUrl'),
          ORQ_PREFIX: prefix,
          ORQ_LOG_LEVEL: 'info',
        });
        try {
          await waitForOutput(child, 'roles started', 60_000);
          expect(await healthcheck(service.healthcheck.test, 9464, port), `${role} ready`).toBe(0);
        } finally {
          expect(await stopProcess(child), `${role} stops cleanly`).toBe(0);
        }
      }),
    );
  }, 120_000);

  it('the dashboard starts with its command and token, and its healthcheck passes', async () => {
    const { command, environment, healthcheck: check } = loadCompose().services.dashboard;
    // Port 3000 may be taken on this machine: the same command on a free port.
    const port = await freePort();
    const child = await runInImage(onPort(command, '--port', port), {
      ...containerEnv(environment),
      REDIS_URL: inject('redisUrl'),
      ORQ_PREFIX: `c${randomUUID().slice(0, 8)}`,
    });
    try {
      await waitForOutput(child, 'HTTP API on', 60_000);
      expect(await healthcheck(check.test, 3000, port)).toBe(0);
    } finally {
      expect(await stopProcess(child)).toBe(0);
    }
  }, 90_000);
});

// --- the replayed image -------------------------------------------------------------------------

let stages: ImageStage[] | undefined;
let building: Promise<ImageStage> | undefined;

function entrypoint(): string[] {
  const line = parseDockerfile(dockerfile)
    .filter((i) => i.keyword === 'ENTRYPOINT')
    .at(-1);
  return z
    .array(z.string())
    .min(2)
    .parse(JSON.parse(line?.args ?? 'null'));
}

/** The final stage of the replayed image, built once per test file. */
function finalStage(): Promise<ImageStage> {
  building ??= dryBuild({
    context: root,
    dockerfile: join(root, 'Dockerfile'),
    dockerignore: join(root, '.dockerignore'),
    nodeModules: join(root, 'node_modules'),
  }).then((built) => {
    stages = built;
    return built.at(-1)!;
  });
  return building;
}

/** The final stage's WORKDIR on the local disk. */
async function image(): Promise<string> {
  const final = await finalStage();
  return join(final.root, final.workdir);
}

afterAll(() => {
  for (const stage of stages ?? []) rmSync(stage.root, { recursive: true, force: true });
});

/** Runs the image's ENTRYPOINT with a service's command, as the container would. */
async function runInImage(args: string[], env: Record<string, string>): Promise<ChildProcess> {
  const app = await image();
  const [program, ...entryArgs] = entrypoint();
  expect(program).toBe('node');
  return spawn(process.execPath, [...entryArgs, ...args], {
    cwd: app,
    env: cleanEnv(env),
    stdio: ['ignore', 'pipe', 'pipe'],
  });
}

/** A service's command with the value of `option` replaced by `port`. */
function onPort(command: readonly string[], option: string, port: number): string[] {
  return command.map((arg, i) => (command[i - 1] === option ? String(port) : arg));
}

/** Runs a `CMD node …` healthcheck against `port` instead of the container's `composePort`. */
function healthcheck(test: readonly string[], composePort: number, port: number): Promise<number> {
  const args = test.slice(2).map((a) => a.replaceAll(`:${composePort}/`, `:${port}/`));
  return run(process.execPath, args).then(
    () => 0,
    (error: { code?: number }) => error.code ?? 1,
  );
}
