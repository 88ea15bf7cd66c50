import { execFileSync } from 'node:child_process';
import { dirname, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { taskBranchName } from '../../src/workers/executors/git-worktree.js';
import { taskWorkspacePath } from '../../src/workers/executors/workspace-dir.js';

const SESSION = '3979185d-466f-4a08-b4df-80ffc7de578c';
/** Pairs of valid task ids that a ref- or path-safe rewrite would make equal. */
const LOOKALIKES: [string, string][] = [
  ['a..b', 'a_b'],
  ['a...b', 'a_b'],
  ['.a', '_a'],
  ['a.lock', 'a_lock'],
  ['a.', 'a_'],
  ['.', '_'],
  ['..', '__'],
];

const validRef = (branch: string) => {
  try {
    execFileSync('git', ['check-ref-format', `refs/heads/${branch}`]);
    return true;
  } catch {
    return false;
  }
};

describe('taskBranchName', () => {
  it('is orq/<session id>/<task id> for a task id git takes as it is', () => {
    expect(taskBranchName(SESSION, 't1')).toBe(`orq/${SESSION}/t1`);
    expect(taskBranchName(SESSION, 'build-api_v2.1')).toBe(`orq/${SESSION}/build-api_v2.1`);
  });

  it('keeps the whole session id: sessions that share a prefix get their own branches', () => {
    const other = `${SESSION.slice(0, 8)}-0000-4000-8000-000000000000`;
    expect(taskBranchName(other, 't1')).not.toBe(taskBranchName(SESSION, 't1'));
  });

  it.each(LOOKALIKES)('gives %j and %j branches of their own, both valid refs', (a, b) => {
    const [one, two] = [taskBranchName(SESSION, a), taskBranchName(SESSION, b)];
    expect(one).not.toBe(two);
    expect(validRef(one), one).toBe(true);
    expect(validRef(two), two).toBe(true);
    // The same id always gives the same branch (a redelivered job finds its work).
    expect(taskBranchName(SESSION, a)).toBe(one);
  });
});

describe('taskWorkspacePath', () => {
  const root = resolve('/tmp/orq-workspaces');

  it.each([
    ['.', '_'],
    ['..', '__'],
  ])('gives %j and %j folders of their own inside the session folder', (a, b) => {
    const [one, two] = [taskWorkspacePath(root, SESSION, a), taskWorkspacePath(root, SESSION, b)];
    expect(one).not.toBe(two);
    expect(dirname(one)).toBe(resolve(root, SESSION));
    expect(dirname(two)).toBe(resolve(root, SESSION));
  });
});
