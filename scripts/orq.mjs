/* global process */
// `npm run orq`: the built CLI. Before `npm run build` a fresh clone got Node's raw
// ERR_MODULE_NOT_FOUND; now it is told what to run. A build older than the sources (a pull, an
// edit) still runs, with a word that it does not have the changes.
import { existsSync, lstatSync, readdirSync, statSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const main = join(root, 'dist', 'producers', 'cli', 'main.js');

if (!existsSync(main)) {
  process.stderr.write(
    'orq: not built yet: run `npm run build` first (or `npm run orq:dev -- …`, which runs the sources with tsx)\n',
  );
  process.exit(2);
}

/** The newest modification time under `dir` (0 when there is no such directory). */
function newestIn(dir) {
  if (!existsSync(dir)) return 0;
  let newest = 0;
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    // lstat: an editor's lock link (Emacs' .#file) points nowhere, and is no source.
    const time = entry.isDirectory() ? newestIn(path) : lstatSync(path).mtimeMs;
    if (time > newest) newest = time;
  }
  return newest;
}

if (newestIn(join(root, 'src')) > statSync(main).mtimeMs) {
  process.stderr.write(
    'orq: warning: dist/ is older than src/: run `npm run build` to use the changes\n',
  );
}

await import(pathToFileURL(main).href);
