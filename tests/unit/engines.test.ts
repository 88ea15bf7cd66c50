import { readdirSync, readFileSync, existsSync } from 'node:fs';
import { join } from 'node:path';
import { createRequire } from 'node:module';
import { describe, expect, it } from 'vitest';

const require = createRequire(import.meta.url);
const semver = require('semver') as { satisfies(version: string, range: string): boolean };

function installedPackages(
  dir: string,
  found: { name: string; version: string; node?: string }[] = [],
) {
  if (!existsSync(dir)) return found;
  for (const name of readdirSync(dir)) {
    if (name.startsWith('.')) continue;
    const path = join(dir, name);
    if (name.startsWith('@')) {
      installedPackages(path, found);
      continue;
    }
    const manifest = join(path, 'package.json');
    if (existsSync(manifest)) {
      const pkg = JSON.parse(readFileSync(manifest, 'utf8')) as {
        name: string;
        version: string;
        engines?: { node?: string };
      };
      found.push({
        name: pkg.name,
        version: pkg.version,
        ...(pkg.engines?.node ? { node: pkg.engines.node } : {}),
      });
    }
    installedPackages(join(path, 'node_modules'), found);
  }
  return found;
}

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
