import { describe, expect, it } from 'vitest';
import { Task } from '../../src/shared/domain/task.js';
import { TaskViewCache } from '../../src/shared/store/task-view-cache.js';

/** Puts `n` tasks in the cache of `sessionId`. */
function fill(cache: TaskViewCache, sessionId: string, n: number): void {
  const tasks = cache.of(sessionId);
  for (let i = 0; i < n; i += 1) {
    const id = `t${i}`;
    tasks.set(id, { task: Task.parse({ id, title: id, acceptance: 'done' }), version: 1 });
  }
}

describe('TaskViewCache', () => {
  it('keeps what was put in a session until the session is dropped', () => {
    const cache = new TaskViewCache(2, 100);
    fill(cache, 'a', 3);
    expect(cache.of('a').size).toBe(3);
    expect(cache.of('b').size).toBe(0);
  });

  it('drops the least recently read sessions beyond the session bound', () => {
    const cache = new TaskViewCache(2, 100);
    for (const id of ['a', 'b', 'c']) fill(cache, id, 1);
    cache.of('a'); // read again: now the most recent
    cache.trim();
    expect(cache.sessionIds()).toEqual(['c', 'a']);
    expect(cache.of('b').size).toBe(0);
  });

  it('drops sessions beyond the task bound, but never the one just read', () => {
    const cache = new TaskViewCache(4, 10);
    fill(cache, 'a', 6);
    fill(cache, 'b', 6);
    cache.trim();
    expect(cache.sessionIds()).toEqual(['b']);
    fill(cache, 'big', 50);
    cache.trim();
    expect(cache.sessionIds()).toEqual(['big']);
    expect(cache.of('big').size).toBe(50);
  });

  it('keeps everything within both bounds', () => {
    const cache = new TaskViewCache(3, 10);
    for (const id of ['a', 'b', 'c']) fill(cache, id, 3);
    cache.trim();
    expect(cache.sessionIds()).toEqual(['a', 'b', 'c']);
  });
});
