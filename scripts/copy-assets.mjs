/* global process */
// Copies the files the compiled code reads at run time (the prompt templates, the session view's script and styles) into dist/,
// next to the modules that load them. Run by `npm run build` after tsc.
import { cpSync, existsSync, mkdirSync, readdirSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const assets = [
  { from: 'src/workers/llm/prompts', to: 'dist/workers/llm/prompts', ext: '.md' },
  // The session view's script and stylesheet, served by the HTTP server (no CDN).
  { from: 'src/producers/http/ui/assets', to: 'dist/producers/http/ui/assets', ext: '' },
];

for (const { from, to, ext } of assets) {
  const source = join(root, from);
  if (!existsSync(source)) throw new Error(`copy-assets: ${from} is missing`);
  mkdirSync(join(root, to), { recursive: true });
  const files = readdirSync(source).filter((name) => name.endsWith(ext));
  for (const name of files) cpSync(join(source, name), join(root, to, name));
  process.stdout.write(`copy-assets: ${files.length} file(s) ${from} -> ${to}\n`);
}
