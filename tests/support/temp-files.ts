import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll } from 'vitest';

/**
 * A temp directory for one test file, made before its tests and removed after them:
 * `const temp = tempFilesPerFile('orq-x-')`, then `temp.dir` and `temp.write(name, text)`.
 */
export function tempFilesPerFile(prefix: string): {
  readonly dir: string;
  write(name: string, text: string): string;
} {
  let dir: string | undefined;
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), prefix));
  });
  afterAll(() => {
    if (dir) rmSync(dir, { recursive: true, force: true });
  });
  const current = (): string => {
    if (!dir) throw new Error('tempFilesPerFile: use the directory inside a test or a hook');
    return dir;
  };
  return {
    get dir() {
      return current();
    },
    write(name, text) {
      const path = join(current(), name);
      writeFileSync(path, text);
      return path;
    },
  };
}
