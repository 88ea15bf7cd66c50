import { mkdtempSync, realpathSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { TestProject } from 'vitest/node';
import { buildCli } from './cli-build.js';

declare module 'vitest' {
  export interface ProvidedContext {
    /** The entry of the CLI the tests' `orq` processes run: src/ as transpiled for this run. */
    cliMain: string;
  }
}

const root = fileURLToPath(new URL('../..', import.meta.url));
let dir: string | undefined;

export async function setup(project: TestProject): Promise<void> {
  // Real: the module URLs a test compares against are (macOS's /tmp is a link).
  const into = realpathSync(mkdtempSync(join(tmpdir(), 'orq-test-cli-')));
  dir = into;
  project.provide('cliMain', await buildCli(root, into));
  // In watch mode the sources change between runs: the processes must run the changed code.
  project.onTestsRerun(async () => {
    await buildCli(root, into);
  });
}

export function teardown(): void {
  if (dir) rmSync(dir, { recursive: true, force: true });
}
