// Every package installed under a node_modules folder, nested copies included, with its
// engines.node: what the engines checks read (tests/unit/engines.test.ts for the repo's own
// tree, scripts/check-package.mjs for a consumer's).
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

/** @param {string} dir a node_modules folder */
export function installedPackages(dir, found = []) {
  if (!existsSync(dir)) return found;
  for (const name of readdirSync(dir)) {
    if (name.startsWith('.')) continue;
    const path = join(dir, name);
    if (name.startsWith('@')) {
      installedPackages(path, found);
      continue;
    }
    const manifest = join(path, 'package.json');
    if (!existsSync(manifest)) continue;
    const pkg = JSON.parse(readFileSync(manifest, 'utf8'));
    found.push({
      name: pkg.name,
      version: pkg.version,
      ...(pkg.engines?.node ? { node: pkg.engines.node } : {}),
    });
    installedPackages(join(path, 'node_modules'), found);
  }
  return found;
}
