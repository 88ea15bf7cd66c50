import {
  createReadStream,
  createWriteStream,
  existsSync,
  mkdirSync,
  readFileSync,
  renameSync,
} from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { pipeline } from 'node:stream/promises';
import { fileURLToPath } from 'node:url';
import { createBrotliDecompress } from 'node:zlib';

/**
 * The headless Chromium the browser tests drive, from the npm package @sparticuz/chromium: it ships
 * a Brotli-compressed chrome-headless-shell (bin/chromium.br, linked only against glibc and NSS),
 * so `npm ci` brings the browser and no apt package or browser download is needed. Pinned exactly
 * (143.0.4, the last whose engines accept Node 20.11) because this reads the package's file
 * layout rather than its API: its API inflates into a fixed /tmp/chromium that it trusts whenever
 * the file exists, even half-written by another run.
 */
const PACKAGE = '@sparticuz/chromium';

/** The flags a root user on a machine without network needs; Playwright adds a fresh profile. */
export const CHROMIUM_ARGS: readonly string[] = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');

function packageDir(): string {
  // The package's exports name only its entry points (build/{esm,cjs}/…), two levels down.
  const entry = createRequire(import.meta.url).resolve(PACKAGE);
  return join(dirname(entry), '..', '..');
}

/**
 * The browser's path, inflated once per package version into node_modules/.cache (about 3 s and
 * 190 MB); later runs reuse it. Written under a unique name and renamed, so a run that reads it
 * never sees a half-written binary, even when two runs inflate at once.
 */
export async function chromiumExecutable(): Promise<string> {
  const dir = packageDir();
  const { version } = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as {
    version: string;
  };
  const cacheDir = join(root, 'node_modules', '.cache', 'orq-chromium', version);
  const executable = join(cacheDir, 'chromium');
  if (existsSync(executable)) return executable;

  const compressed = join(dir, 'bin', 'chromium.br');
  if (!existsSync(compressed)) {
    throw new Error(
      `${compressed} is missing: run npm ci (the browser tests take Chromium from ${PACKAGE}@${version})`,
    );
  }
  mkdirSync(cacheDir, { recursive: true });
  const partial = `${executable}.${process.pid}.partial`;
  await pipeline(
    createReadStream(compressed),
    createBrotliDecompress(),
    createWriteStream(partial, { mode: 0o755 }),
  );
  renameSync(partial, executable);
  return executable;
}
