import { createRequire } from 'node:module';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { installedPackages } from '../../scripts/installed-packages.mjs';

const require = createRequire(import.meta.url);
const semver = require('semver') as { satisfies(version: string, range: string): boolean };

describe('installed dependencies', () => {
  it('all accept the Node version running the tests (Node 20 on our machines)', () => {
    const rejecting = installedPackages(join(process.cwd(), 'node_modules'))
      .filter((p) => p.node && !semver.satisfies(process.versions.node, p.node))
      .map((p) => `${p.name}@${p.version} wants node ${p.node}`);
    expect(rejecting).toEqual([]);
  });
});

describe('npm run test:node', () => {
  // Set by scripts/test-on-node.mjs to the version it fetched: a run that fell back to the
  // machine's Node (a PATH that lost the fetched one) would report the other runtime's results.
  it('runs the tests on the Node version it asked for (ORQ_TEST_NODE), when it asked', () => {
    const asked = process.env.ORQ_TEST_NODE;
    if (asked === undefined) return;
    expect(`${process.versions.node}.`.startsWith(`${asked}.`)).toBe(true);
  });
});
