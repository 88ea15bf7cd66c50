#!/usr/bin/env node
/* global process, console */
// `npm run check:package`, after `npm run build`: installs orq as a consumer does and runs the
// README's library example against it. The repo's own tree (package-lock.json, overrides) is not
// what a consumer gets: npm resolves the published ranges afresh and ignores our overrides. So:
//   1. npm pack, then `npm install <tarball>` into an empty project, from the registry: it fails
//      on any EBADENGINE warning, and on any installed package whose engines refuse the first
//      release of each Node line orq's engines accept (20.11.0, 22.0.0, 23.0.0 … 26.0.0);
//   2. installs what the example needs beside orq (pino; typescript and @types/node as the repo
//      has them), type-checks examples/library/quickstart.ts with tsc --strict;
//   3. runs it, compiled, against a redis-server of its own on a free port: it must finish its
//      session COMPLETED and exit by itself; and runs the installed `orq --version`.
// The temporary project is removed (in the background) when the check passes, and kept, with its
// path printed, when it fails.
import { spawn, spawnSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { clearTimeout, setTimeout } from 'node:timers';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { installedPackages } from './installed-packages.mjs';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const EXAMPLE = join(root, 'examples', 'library', 'quickstart.ts');
const RUN_TIMEOUT_MS = 120_000;
const RUNTIME_ASSETS = [
  'dist/producers/http/ui/assets/ui.js',
  'dist/producers/http/ui/assets/ui.css',
];
/** The newest Node line released (26: April 2026), checked even from an older Node. */
const NEWEST_LINE = 26;
const semver = createRequire(import.meta.url)('semver');

class CheckFailed extends Error {}

function fail(message) {
  throw new CheckFailed(message);
}

const started = Date.now();
/** A command's output, indented under the step that ran it. */
function echo(output) {
  const text = output.trimEnd();
  if (text) console.log(text.replace(/^/gm, '  | '));
}

function step(message) {
  console.log(`check:package [${((Date.now() - started) / 1000).toFixed(1)} s] ${message}`);
}

/**
 * The environment without npm's own variables: run from `npm run`, this process carries
 * npm_config_* (the repo as local prefix, `--silent` as loglevel, which would hide the warnings
 * checked here), which would steer the nested npm. Where the registry is reached is kept.
 */
const KEPT_NPM_CONFIG = /^npm_config_(registry|.*proxy|cafile|ca|strict_ssl|.+:registry)$/i;
const cleanEnv = Object.fromEntries(
  Object.entries(process.env).filter(
    ([key]) => !key.toLowerCase().startsWith('npm_') || KEPT_NPM_CONFIG.test(key),
  ),
);

/** Runs a command to its end; fails, with its output, when it exits non-zero. */
function run(command, args, cwd) {
  const result = spawnSync(command, args, { cwd, env: cleanEnv, encoding: 'utf8' });
  const output = `${result.stdout ?? ''}${result.stderr ?? ''}`;
  if (result.error) fail(`${command} ${args.join(' ')}: ${result.error.message}`);
  if (result.status !== 0) {
    fail(`${command} ${args.join(' ')} exited with ${result.status}:\n${output}`);
  }
  return { stdout: result.stdout, output };
}

/** npm install in the project; fails on an EBADENGINE warning (npm only warns, and installs). */
function npmInstall(project, specs) {
  const { output } = run('npm', ['install', '--no-audit', '--no-fund', ...specs], project);
  echo(output);
  if (/EBADENGINE/.test(output)) {
    fail(`npm install ${specs.join(' ')} warned EBADENGINE: a dependency refuses this Node`);
  }
}

/**
 * The first release of each Node line that `range` accepts, from its lowest version up to this
 * Node's line or NEWEST_LINE, whichever is newer: the Nodes a consumer may install orq on.
 * (orq's engines leave Node 21 out: several dependencies, glob, minimatch and lru-cache among
 * them, refuse it.)
 */
function supportedNodeFloors(range) {
  const lowest = semver.minVersion(range);
  const newest = Math.max(semver.major(process.versions.node), NEWEST_LINE);
  const floors = [lowest.version];
  for (let major = lowest.major + 1; major <= newest; major += 1) {
    if (semver.satisfies(`${major}.0.0`, range)) floors.push(`${major}.0.0`);
  }
  return floors;
}

/** Runs the compiled example with a deadline; resolves with its output, fails otherwise. */
function runExample(project, script, env) {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [script], {
      cwd: project,
      env: { ...cleanEnv, ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    child.stdout.on('data', (chunk) => (output += chunk));
    child.stderr.on('data', (chunk) => (output += chunk));
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new CheckFailed(`the example did not exit within ${RUN_TIMEOUT_MS} ms:\n${output}`));
    }, RUN_TIMEOUT_MS);
    child.on('error', (error) => {
      clearTimeout(timer);
      reject(error);
    });
    child.on('exit', (code, signal) => {
      clearTimeout(timer);
      if (code === 0) resolve(output);
      else reject(new CheckFailed(`the example exited with ${code ?? signal}:\n${output}`));
    });
  });
}

async function main(project) {
  const repo = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'));
  if (!existsSync(join(root, repo.main))) {
    fail(`${repo.main} is missing: run npm run build first (the tarball packs dist/)`);
  }

  step(`npm pack into ${project}`);
  const packed = JSON.parse(
    run('npm', ['pack', '--json', '--pack-destination', project], root).stdout,
  );
  const tarball = join(project, packed[0].filename);
  // Files the server reads beside its modules, which tsc does not emit: the session view's.
  const shipped = new Set(packed[0].files.map((file) => file.path));
  for (const asset of RUNTIME_ASSETS) {
    if (!shipped.has(asset)) fail(`${asset} is not in the package: did copy-assets run?`);
  }

  writeFileSync(
    join(project, 'package.json'),
    `${JSON.stringify({ name: 'orq-quickstart', private: true, type: 'module' }, null, 2)}\n`,
  );
  step(`npm install ${packed[0].filename} on Node ${process.versions.node}`);
  npmInstall(project, [tarball]);

  const floors = supportedNodeFloors(repo.engines.node);
  step(`engines of the installed tree against Node ${floors.join(', ')}`);
  const refusing = installedPackages(join(project, 'node_modules')).flatMap(
    ({ name, version, node }) =>
      floors
        .filter((floor) => node && !semver.satisfies(floor, node))
        .map((floor) => `${name}@${version} (engines ${node}) refuses Node ${floor}`),
  );
  if (refusing.length > 0) {
    fail(`orq's engines accept Node ${repo.engines.node}, but:\n  ${refusing.join('\n  ')}`);
  }

  // The example's own dependencies: pino in the range orq takes (startRoles wants its logger),
  // the type checker and Node's types as the repo pins them.
  const deps = { ...repo.dependencies, ...repo.devDependencies };
  step('npm install pino typescript @types/node');
  npmInstall(project, [
    `pino@${deps.pino}`,
    `typescript@${deps.typescript}`,
    `@types/node@${deps['@types/node']}`,
  ]);

  step('tsc --strict examples/library/quickstart.ts');
  copyFileSync(EXAMPLE, join(project, 'quickstart.ts'));
  writeFileSync(
    join(project, 'tsconfig.json'),
    `${JSON.stringify(
      {
        compilerOptions: {
          target: 'ES2022',
          module: 'NodeNext',
          moduleResolution: 'NodeNext',
          types: ['node'],
          strict: true,
          outDir: 'build',
        },
        files: ['quickstart.ts'],
      },
      null,
      2,
    )}\n`,
  );
  run(join(project, 'node_modules', '.bin', 'tsc'), ['-p', '.', '--strict'], project);

  step('orq --version from the installed package');
  const version = run(join(project, 'node_modules', '.bin', 'orq'), ['--version'], project);
  if (!version.stdout.includes(repo.version)) {
    fail(`orq --version printed ${JSON.stringify(version.stdout)}, not ${repo.version}`);
  }

  const { startPrivateRedis } = await import(
    pathToFileURL(join(root, 'dist', 'shared', 'redis-server.js')).href
  );
  const redis = await startPrivateRedis({ dir: join(project, 'redis') });
  try {
    step(`node build/quickstart.js against ${redis.url}`);
    const output = await runExample(project, join(project, 'build', 'quickstart.js'), {
      REDIS_URL: redis.url,
    });
    echo(output);
    if (!/^session \S+: COMPLETED, [1-9]\d* task\(s\)$/m.test(output)) {
      fail('the example exited without a COMPLETED session with tasks');
    }
  } finally {
    await redis.stop();
  }
}

const project = mkdtempSync(join(tmpdir(), 'orq-package-'));
try {
  await main(project);
  step('passed');
  // Removing its 170 MB takes about 40 s here (ext4 mounted with discard): done in the
  // background, so CI goes on meanwhile.
  spawn('rm', ['-rf', project], { detached: true, stdio: 'ignore' }).unref();
} catch (error) {
  const message = error instanceof CheckFailed ? error.message : (error?.stack ?? String(error));
  console.error(`check:package FAILED: ${message}\n(the project is kept in ${project})`);
  process.exit(1);
}
