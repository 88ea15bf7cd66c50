import { describe, expect, it } from 'vitest';
import { Task, type TaskInput } from '../../src/shared/domain/task.js';
import {
  branchesToMerge,
  hasGitArtifacts,
  matchesPattern,
} from '../../src/shared/rules/integration-plan.js';

/** A task; DONE ones carry a git artifact unless `git: false`. */
function task(id: string, input: Partial<TaskInput> & { git?: boolean } = {}): Task {
  const { git = true, ...rest } = input;
  const state = rest.state ?? 'DONE';
  return Task.parse({
    id,
    title: `Task ${id}`,
    acceptance: 'done',
    state,
    ...(git && state === 'DONE'
      ? {
          result: {
            output: 'ok',
            artifacts: [
              {
                kind: 'git',
                meta: { repository: '/repo', branch: `orq/s/${id}`, commit: `c-${id}` },
              },
            ],
          },
        }
      : {}),
    ...rest,
  });
}

const order = (tasks: Task[]) => branchesToMerge(tasks).map((b) => b.taskId);

describe('which task branches an integration merges, in what order', () => {
  it('merges the done tasks with a git artifact, their recorded commits, in session order', () => {
    expect(branchesToMerge([task('a'), task('b')])).toEqual([
      { taskId: 'a', title: 'Task a', branch: 'orq/s/a', commit: 'c-a', repository: '/repo' },
      { taskId: 'b', title: 'Task b', branch: 'orq/s/b', commit: 'c-b', repository: '/repo' },
    ]);
  });

  it('puts every task after the tasks it depends on, whatever the session order', () => {
    expect(
      order([task('c', { dependencies: ['b'] }), task('b', { dependencies: ['a'] }), task('a')]),
    ).toEqual(['a', 'b', 'c']);
  });

  it('leaves out tasks that are not done or have no branch', () => {
    const tasks = [
      task('a'),
      task('skipped', { state: 'SKIPPED' }),
      task('llm', { git: false }),
      task('cancelled', { state: 'CANCELLED' }),
    ];
    expect(order(tasks)).toEqual(['a']);
    expect(hasGitArtifacts([task('llm', { git: false })])).toBe(false);
    expect(hasGitArtifacts(tasks)).toBe(true);
  });

  it('counts a REPLACED_BY_REPLAN task through its replacements', () => {
    // b was replaced by b1 and b2 (b2 after b1); c still names b.
    const tasks = [
      task('c', { dependencies: ['b'] }),
      task('a'),
      task('b', {
        state: 'REPLACED_BY_REPLAN',
        dependencies: ['a'],
        replanningInfo: { iteration: 1, maxIterations: 3, replacedBy: ['b1', 'b2'] },
      }),
      task('b2', { dependencies: ['b1'] }),
      task('b1', { dependencies: ['a'] }),
    ];
    expect(order(tasks)).toEqual(['a', 'b1', 'b2', 'c']);
  });

  it('orders through a done task without a branch to the ones it depends on', () => {
    const tasks = [
      task('c', { dependencies: ['llm'] }),
      task('llm', { git: false, dependencies: ['a'] }),
      task('a'),
    ];
    expect(order(tasks)).toEqual(['a', 'c']);
  });
});

describe('resolver file patterns', () => {
  it.each([
    ['package-lock.json', 'package-lock.json', true],
    ['web/package-lock.json', 'package-lock.json', true],
    ['web/package-lock.json', '**/package-lock.json', true],
    ['package-lock.json', '**/package-lock.json', true],
    ['web/package-lock.json', 'web/*.json', true],
    ['web/deep/package-lock.json', 'web/*.json', false],
    ['src/gen/api.ts', 'src/gen/**', true],
    ['src/api.ts', 'src/gen/**', false],
    ['yarn.lock', 'package-lock.json', false],
    ['a.b', 'a?b', true],
    ['axb.lock', 'a.b*', false],
  ])('%s against %s: %s', (path, pattern, expected) => {
    expect(matchesPattern(path, pattern)).toBe(expected);
  });
});
