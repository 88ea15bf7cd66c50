import { copyFileSync, mkdirSync, readdirSync, rmSync, statSync, symlinkSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { build } from 'esbuild';

/**
 * Transpiles src/ into `dir` for the tests' `orq` processes: once per test run, where running
 * the sources through tsx's loader costs every process about 0.4 s of start-up (the e2e files
 * start hundreds). esbuild is what tsx transpiles with, so the code run is the same. The layout
 * is dist/'s, beside a copy of package.json (its "type" and version, which orq reads at
 * `../../package.json`) and a link to node_modules, so the modules find what they find in dist/.
 * Returns the path of the CLI's entry.
 */
export async function buildCli(root: string, dir: string): Promise<string> {
  const src = join(root, 'src');
  const out = join(dir, 'dist');
  rmSync(out, { recursive: true, force: true });
  const files = readdirSync(src, { recursive: true, encoding: 'utf8' }).filter((file) =>
    statSync(join(src, file)).isFile(),
  );
  await build({
    entryPoints: files.filter((file) => file.endsWith('.ts')).map((file) => join(src, file)),
    outbase: src,
    outdir: out,
    format: 'esm',
    platform: 'node',
    target: 'node20',
    tsconfig: join(root, 'tsconfig.build.json'),
    logLevel: 'warning',
  });
  // What the modules read at run time beside themselves (the prompt templates).
  for (const file of files.filter((file) => !file.endsWith('.ts'))) {
    mkdirSync(dirname(join(out, file)), { recursive: true });
    copyFileSync(join(src, file), join(out, file));
  }
  copyFileSync(join(root, 'package.json'), join(dir, 'package.json'));
  rmSync(join(dir, 'node_modules'), { force: true });
  symlinkSync(join(root, 'node_modules'), join(dir, 'node_modules'), 'dir');
  return join(out, 'producers/cli/main.js');
}
