import { describe, expect, it } from 'vitest';
import { Task } from '../../src/shared/domain/task.js';
import { WrittenTasks } from '../../src/shared/store/written-tasks.js';

const entry = (id: string, version = 1) => ({
  task: Task.parse({ id, title: id, acceptance: `${id} is done` }),
  version,
});

describe('WrittenTasks', () => {
  it('gives every task asked for, or nothing when one is missing', () => {
    const written = new WrittenTasks(10);
    written.put('s1', entry('a', 2));
    written.put('s1', entry('b', 5));
    expect(written.get('s1', ['a', 'b'])).toEqual(
      new Map([
        ['a', entry('a', 2)],
        ['b', entry('b', 5)],
      ]),
    );
    expect(written.get('s1', ['a', 'c'])).toBeUndefined();
    expect(written.get('s2', ['a'])).toBeUndefined();
    expect(written.get('s1', [])).toEqual(new Map());
  });

  it('keeps the last write of a task, counted once', () => {
    const written = new WrittenTasks(10);
    written.put('s1', entry('a', 1));
    written.put('s1', entry('a', 2));
    expect(written.size).toBe(1);
    expect(written.get('s1', ['a'])?.get('a')?.version).toBe(2);
  });

  it("drops one task, or a whole session's", () => {
    const written = new WrittenTasks(10);
    for (const id of ['a', 'b']) written.put('s1', entry(id));
    written.put('s2', entry('a'));
    written.drop('s1', 'a');
    written.drop('s1', 'missing');
    expect(written.size).toBe(2);
    expect(written.get('s1', ['a'])).toBeUndefined();
    written.forget('s1');
    written.forget('unknown');
    expect(written.size).toBe(1);
    expect(written.get('s1', ['b'])).toBeUndefined();
    expect(written.get('s2', ['a'])).toBeDefined();
  });

  it('holds at most its capacity, dropping the tasks of the session touched longest ago', () => {
    const written = new WrittenTasks(3);
    written.put('old', entry('a'));
    written.put('old', entry('b'));
    written.put('new', entry('a'));
    // Touching "old" again makes "new" the one touched longest ago.
    written.put('old', entry('c'));
    expect(written.size).toBe(3);
    expect(written.get('new', ['a'])).toBeUndefined();
    expect(written.get('old', ['a', 'b', 'c'])).toBeDefined();
    written.put('new', entry('x'));
    expect(written.size).toBe(3);
    // The oldest task of the oldest session went first.
    expect(written.get('old', ['a'])).toBeUndefined();
    expect(written.get('old', ['b', 'c'])).toBeDefined();
    expect(written.get('new', ['x'])).toBeDefined();
  });
});
