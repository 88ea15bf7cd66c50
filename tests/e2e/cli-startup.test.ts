import { existsSync, mkdtempSync, readdirSync, readFileSync } from 'node:fs';
import module from 'node:module';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { describe, expect, it } from 'vitest';
import { cliModules, orq, root } from '../support/cli.js';
import { tempFilesPerFile } from '../support/temp-files.js';

const temp = tempFilesPerFile('orq-cli-startup-');

/** The URL of every module `orq ARGS` loads, recorded by a module hook, and its exit code. */
async function modulesLoaded(
  args: string[],
  options: { cwd?: string } = {},
): Promise<{ urls: string[]; code: number; stderr: string }> {
  const file = temp.write(`loaded-${args.join('-')}.txt`, '');
  const hook = pathToFileURL(join(root, 'tests/support/record-loads.mjs')).href;
  const result = await orq(args, {
    env: { ORQ_TEST_LOADED_FILE: file },
    preload: [hook],
    ...options,
  });
  const urls = readFileSync(file, 'utf8').split('\n').filter(Boolean);
  return { urls, code: result.code, stderr: result.stderr };
}

/** The packages among the modules `orq ARGS` loads (it must exit 0). */
async function packagesLoaded(args: string[], options: { cwd?: string } = {}) {
  const { urls, code, stderr } = await modulesLoaded(args, options);
  expect(code, stderr).toBe(0);
  return new Set(
    urls
      .map((url) => /node_modules\/((?:@[^/]+\/)?[^/]+)\//.exec(url)?.[1])
      .filter((name): name is string => name !== undefined),
  );
}

/** orq's own modules among `urls` under a directory of its sources (`workers/`, say). */
const ownModulesUnder = (urls: string[], dir: string) =>
  urls.filter((url) => url.startsWith(pathToFileURL(join(cliModules(), dir)).href));

describe('orq --version', () => {
  it("prints the package's version", async () => {
    const { version } = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as {
      version: string;
    };
    const result = await orq(['--version']);
    expect(result).toMatchObject({ code: 0, stdout: `${version}\n` });
  });
});

describe('the compile cache', () => {
  it('is on where Node has one (22.1+), in its default place, and the command runs alike without', async () => {
    const hasCache =
      typeof (module as { enableCompileCache?: unknown }).enableCompileCache === 'function';
    // os.tmpdir() follows TMPDIR: the default cache directory is under it.
    const tmp = mkdtempSync(join(temp.dir, 'tmp-'));
    const cache = join(tmp, 'node-compile-cache');
    const result = await orq(['--version'], {
      env: { TMPDIR: tmp, NODE_DISABLE_COMPILE_CACHE: undefined },
    });
    expect(result.code, result.stderr).toBe(0);
    expect(result.stdout).toMatch(/^\d+\.\d+\.\d+/);
    expect(existsSync(cache) && readdirSync(cache, { recursive: true }).length > 0).toBe(hasCache);
  });
});

// Every command module is registered at start, so what `--version` loads every command pays for.
describe('orq start-up', () => {
  it('loads no LLM SDK, MCP client, HTTP server or metrics library until a command needs one', async () => {
    const loaded = await packagesLoaded(['status'], { cwd: temp.dir });
    // The recording works: the CLI's own dependencies are there.
    expect(loaded).toContain('commander');
    expect(loaded).toContain('bullmq');
    for (const heavy of [
      'openai',
      '@anthropic-ai/sdk',
      '@modelcontextprotocol/sdk',
      'fastify',
      '@bull-board/api',
      'prom-client',
      // Tracing is off without an OTEL_* endpoint: its SDK does not load.
      '@opentelemetry/sdk-trace-node',
      '@opentelemetry/exporter-trace-otlp-http',
    ]) {
      expect(loaded, heavy).not.toContain(heavy);
    }
  });

  // Each command's action loads with it: what the others need is not paid for by every process.
  it('answers --version, --help and a usage error without loading BullMQ, Redis or the client', async () => {
    for (const args of [['--version'], ['--help'], ['status', '--limit', '0']]) {
      const { urls, code } = await modulesLoaded(args);
      expect(code, args.join(' ')).toBe(args[0] === 'status' ? 2 : 0);
      expect(
        urls.some((url) => url.includes('node_modules/commander/')),
        args.join(' '),
      ).toBe(true);
      for (const heavy of [
        'node_modules/bullmq/',
        'node_modules/ioredis/',
        pathToFileURL(join(cliModules(), 'producers/client.js')).href,
      ]) {
        expect(
          urls.filter((url) => url.includes(heavy)),
          `${args.join(' ')}: ${heavy}`,
        ).toEqual([]);
      }
    }
  });

  it('loads the roles only for a command that runs them', async () => {
    // status talks to Redis through the client (here: none has run in this directory)...
    const status = await modulesLoaded(['status'], { cwd: temp.dir });
    expect(status.code, status.stderr).toBe(0);
    expect(ownModulesUnder(status.urls, 'producers/client.js')).not.toEqual([]);
    expect(ownModulesUnder(status.urls, 'workers/')).toEqual([]);
    // ...while `orq run` runs every role in its process (refused here before any Redis starts).
    const run = await modulesLoaded(['run', 'Write it', '--scenario', 'no-such-scenario.yaml'], {
      cwd: temp.dir,
    });
    expect(run.code).toBe(2);
    expect(ownModulesUnder(run.urls, 'workers/registry.js')).not.toEqual([]);
  });
});
