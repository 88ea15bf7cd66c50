import { describe, expect, it } from 'vitest';
import { criticalPaths, pickForSlots, waitingScore } from '../../src/shared/rules/critical-path.js';

const graph = (edges: Record<string, string[]>) =>
  Object.entries(edges).map(([id, dependents]) => ({ id, dependents }));

describe('criticalPaths: tasks in the longest chain of dependents behind each task', () => {
  it.each([
    ['a lone task counts itself', { A: [] }, { A: 1 }],
    ['a chain counts down to its end', { A: ['B'], B: ['C'], C: [] }, { A: 3, B: 2, C: 1 }],
    [
      'a fork takes its longer branch',
      { A: ['B', 'C'], B: [], C: ['D'], D: [] },
      { A: 3, B: 1, C: 2, D: 1 },
    ],
    [
      'a diamond counts its join once per path',
      { A: ['B', 'C'], B: ['D'], C: ['D'], D: [] },
      { A: 3, B: 2, C: 2, D: 1 },
    ],
    ['independent tasks are 1 each', { A: [], B: [], C: [] }, { A: 1, B: 1, C: 1 }],
    ['unknown dependents are ignored', { A: ['Z'] }, { A: 1 }],
  ])('%s', (_name, edges, expected) => {
    expect(Object.fromEntries(criticalPaths(graph(edges)))).toEqual(expected);
  });

  it('builds on the lengths of tasks outside the graph (a replan’s rewired dependents)', () => {
    const fixed = new Map([['D', 4]]);
    expect(Object.fromEntries(criticalPaths(graph({ S1: ['S2'], S2: ['D'] }), fixed))).toEqual({
      S1: 6,
      S2: 5,
    });
  });

  it('walks a chain of 20,000 tasks without overflowing the stack', () => {
    const n = 20_000;
    const nodes = Array.from({ length: n }, (_, i) => ({
      id: `t${i}`,
      dependents: i + 1 < n ? [`t${i + 1}`] : [],
    }));
    expect(criticalPaths(nodes).get('t0')).toBe(n);
  });
});

describe('pickForSlots: which ready tasks take the free slots', () => {
  const ready = [
    { id: 'b', criticalPath: 1 },
    { id: 'c', criticalPath: 3 },
    { id: 'a', criticalPath: 1 },
    { id: 'd', criticalPath: 2 },
    { id: 'e' },
  ];
  it.each([
    [0, []],
    [-2, []],
    [1, ['c']],
    [2, ['c', 'd']],
    [4, ['c', 'd', 'a', 'b']],
    [10, ['c', 'd', 'a', 'b', 'e']],
    [Infinity, ['c', 'd', 'a', 'b', 'e']],
  ])('%d free slot(s) take %j: longest path first, ties by id', (free, ids) => {
    expect(pickForSlots(ready, free).map((t) => t.id)).toEqual(ids);
  });

  it('with a spread, draws the free slots from the first free + spread, no task twice', () => {
    const draws = [0.99, 0, 0.5];
    let i = 0;
    const picked = pickForSlots(ready, 2, 1, () => draws[i++] ?? 0);
    // The window is c, d, a: 0.99 takes a, then 0 takes c.
    expect(picked.map((t) => t.id)).toEqual(['a', 'c']);
    for (let n = 0; n < 50; n += 1) {
      const ids = pickForSlots(ready, 3, 2).map((t) => t.id);
      expect(new Set(ids).size).toBe(3);
      expect(ids.every((id) => ['c', 'd', 'a', 'b', 'e'].includes(id))).toBe(true);
    }
  });

  it('orders like the ready set in Redis (lowest score first, ties by id)', () => {
    const byScore = [...ready].sort(
      (x, y) =>
        waitingScore(x.criticalPath) - waitingScore(y.criticalPath) || x.id.localeCompare(y.id),
    );
    expect(byScore.map((t) => t.id)).toEqual(pickForSlots(ready, Infinity).map((t) => t.id));
  });
});
