import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { describe, expect, it } from 'vitest';
import { orq, root } from '../support/cli.js';
import { tempFilesPerFile } from '../support/temp-files.js';

const temp = tempFilesPerFile('orq-cli-startup-');

/** The packages of every module `orq ARGS` loads, recorded by a module hook. */
async function packagesLoaded(args: string[]): Promise<Set<string>> {
  const file = temp.write('loaded.txt', '');
  const hook = pathToFileURL(join(root, 'tests/support/record-loads.mjs')).href;
  const result = await orq(args, { env: { ORQ_TEST_LOADED_FILE: file }, preload: [hook] });
  expect(result.code, result.stderr).toBe(0);
  const packages = readFileSync(file, 'utf8')
    .split('\n')
    .map((url) => /node_modules\/((?:@[^/]+\/)?[^/]+)\//.exec(url)?.[1])
    .filter((name): name is string => name !== undefined);
  return new Set(packages);
}

describe('orq --version', () => {
  it("prints the package's version", async () => {
    const { version } = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as {
      version: string;
    };
    const result = await orq(['--version']);
    expect(result).toMatchObject({ code: 0, stdout: `${version}\n` });
  });
});

// Every command module is registered at start, so what `--version` loads every command pays for.
describe('orq start-up', () => {
  it('loads no LLM SDK, MCP client, HTTP server or metrics library until a command needs one', async () => {
    const loaded = await packagesLoaded(['--version']);
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
    ]) {
      expect(loaded, heavy).not.toContain(heavy);
    }
  });
});
