import { describe, expect, it } from 'vitest';
import { parseTaskIds } from '../../src/producers/cli/options.js';

describe('parseTaskIds (orq resume --task)', () => {
  it('adds the ids of each value, comma-separated or repeated, trimmed', () => {
    expect(parseTaskIds('t1')).toEqual(['t1']);
    expect(parseTaskIds(' t2 , t3,', ['t1'])).toEqual(['t1', 't2', 't3']);
  });

  it.each(['', '  ', ',', ' , '])('refuses %j as an empty task id', (value) => {
    expect(() => parseTaskIds(value)).toThrow(/the task id is empty/);
  });

  it('refuses an id a task cannot have, naming it', () => {
    expect(() => parseTaskIds('t1,bad id!')).toThrow(/"bad id!" is not a task id/);
  });
});
