import { describe, it, expect } from 'vitest';
import type { TaskState } from '../../src/shared/domain/task.js';
import { summarizeSessionProgress } from '../../src/shared/rules/session-progress.js';

const t = (id: string, state: TaskState, dependencies: string[] = []) => ({
  id,
  state,
  dependencies,
});

describe('summarizeSessionProgress: counts', () => {
  it('counts every state, with zero for the states no task is in', () => {
    const progress = summarizeSessionProgress([
      t('a', 'DONE'),
      t('b', 'DONE'),
      t('c', 'RUNNING'),
      t('d', 'READY', ['c']),
    ]);
    expect(progress.counts).toEqual({
      READY: 1,
      RUNNING: 1,
      NEEDS_CONTINUATION: 0,
      DONE: 2,
      BLOCKED: 0,
      CANCELLED: 0,
      SKIPPED: 0,
      REPLACED_BY_REPLAN: 0,
    });
    expect(progress.total).toBe(4);
  });
});

describe('summarizeSessionProgress: finished', () => {
  it('is finished when every task is done', () => {
    expect(summarizeSessionProgress([t('a', 'DONE'), t('b', 'DONE', ['a'])]).finished).toBe(true);
  });

  it('is finished when the tasks are done, replaced, skipped or cancelled', () => {
    const progress = summarizeSessionProgress([
      t('a', 'DONE'),
      t('b', 'REPLACED_BY_REPLAN'),
      t('c', 'SKIPPED'),
      t('d', 'CANCELLED'),
    ]);
    expect(progress).toMatchObject({ finished: true, blocked: false, stalled: false });
    expect(progress.runnableTaskIds).toEqual([]);
  });

  it('is not finished while a task runs', () => {
    expect(summarizeSessionProgress([t('a', 'DONE'), t('b', 'RUNNING')]).finished).toBe(false);
  });

  it('is not finished while a task is BLOCKED', () => {
    expect(summarizeSessionProgress([t('a', 'DONE'), t('b', 'BLOCKED')]).finished).toBe(false);
  });

  it('is neither finished nor blocked with no tasks yet', () => {
    expect(summarizeSessionProgress([])).toMatchObject({
      total: 0,
      finished: false,
      blocked: false,
      stalled: false,
      runnableTaskIds: [],
    });
  });
});

describe('summarizeSessionProgress: runnable tasks', () => {
  it('lists READY tasks without dependencies', () => {
    const progress = summarizeSessionProgress([t('a', 'READY'), t('b', 'READY')]);
    expect(progress.runnableTaskIds).toEqual(['a', 'b']);
  });

  it('lists a READY task whose dependencies are done', () => {
    const progress = summarizeSessionProgress([
      t('a', 'DONE'),
      t('b', 'DONE'),
      t('c', 'READY', ['a', 'b']),
    ]);
    expect(progress.runnableTaskIds).toEqual(['c']);
  });

  it('lists a READY task behind a SKIPPED dependency', () => {
    const progress = summarizeSessionProgress([t('a', 'SKIPPED'), t('b', 'READY', ['a'])]);
    expect(progress.runnableTaskIds).toEqual(['b']);
  });

  it('does not list a READY task behind a dependency that is not done yet', () => {
    const progress = summarizeSessionProgress([
      t('a', 'DONE'),
      t('b', 'RUNNING'),
      t('c', 'READY', ['a', 'b']),
    ]);
    expect(progress.runnableTaskIds).toEqual([]);
  });

  it('does not list a READY task behind another READY task', () => {
    const progress = summarizeSessionProgress([t('a', 'READY'), t('b', 'READY', ['a'])]);
    expect(progress.runnableTaskIds).toEqual(['a']);
  });

  it('does not list a READY task behind a BLOCKED task', () => {
    const progress = summarizeSessionProgress([t('a', 'BLOCKED'), t('b', 'READY', ['a'])]);
    expect(progress.runnableTaskIds).toEqual([]);
  });

  it('never lists a READY task behind a CANCELLED task', () => {
    const progress = summarizeSessionProgress([t('a', 'CANCELLED'), t('b', 'READY', ['a'])]);
    expect(progress.runnableTaskIds).toEqual([]);
  });

  it('does not list a READY task behind a task that was replaced and not rewired', () => {
    const progress = summarizeSessionProgress([
      t('a', 'REPLACED_BY_REPLAN'),
      t('b', 'READY', ['a']),
    ]);
    expect(progress.runnableTaskIds).toEqual([]);
  });

  it('does not list a READY task behind an id no task has', () => {
    expect(summarizeSessionProgress([t('b', 'READY', ['ghost'])]).runnableTaskIds).toEqual([]);
  });

  it('does not list tasks in other states, whatever their dependencies', () => {
    const progress = summarizeSessionProgress([
      t('a', 'RUNNING'),
      t('b', 'NEEDS_CONTINUATION'),
      t('c', 'BLOCKED'),
      t('d', 'DONE'),
    ]);
    expect(progress.runnableTaskIds).toEqual([]);
  });
});

describe('summarizeSessionProgress: blocked', () => {
  it('is blocked when the only unfinished task is BLOCKED', () => {
    const progress = summarizeSessionProgress([t('a', 'DONE'), t('b', 'BLOCKED', ['a'])]);
    expect(progress).toMatchObject({ finished: false, blocked: true, stalled: true });
  });

  it('is blocked when every READY task waits behind a BLOCKED task', () => {
    const progress = summarizeSessionProgress([
      t('a', 'BLOCKED'),
      t('b', 'READY', ['a']),
      t('c', 'READY', ['b']),
    ]);
    expect(progress.blocked).toBe(true);
  });

  it('is not blocked while another task can still run', () => {
    const progress = summarizeSessionProgress([t('a', 'BLOCKED'), t('b', 'READY')]);
    expect(progress).toMatchObject({ blocked: false, runnableTaskIds: ['b'] });
  });

  it('is not blocked while another task runs', () => {
    const progress = summarizeSessionProgress([t('a', 'BLOCKED'), t('b', 'RUNNING')]);
    expect(progress.blocked).toBe(false);
  });

  it('is not blocked while another task waits to continue', () => {
    const progress = summarizeSessionProgress([t('a', 'BLOCKED'), t('b', 'NEEDS_CONTINUATION')]);
    expect(progress.blocked).toBe(false);
  });

  it('is not blocked when nothing is BLOCKED', () => {
    const progress = summarizeSessionProgress([t('a', 'DONE'), t('b', 'READY', ['a'])]);
    expect(progress.blocked).toBe(false);
  });

  it('is stalled but not blocked when READY tasks wait only on a CANCELLED task', () => {
    const progress = summarizeSessionProgress([t('a', 'CANCELLED'), t('b', 'READY', ['a'])]);
    expect(progress).toMatchObject({ finished: false, blocked: false, stalled: true });
  });

  it('is not stalled while a task can run', () => {
    expect(summarizeSessionProgress([t('a', 'READY')]).stalled).toBe(false);
  });
});
