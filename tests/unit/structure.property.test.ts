import { describe, it, expect } from 'vitest';
import fc from 'fast-check';
import { RefinementConfig } from '../../src/shared/config/schema.js';
import {
  findCycles,
  findDanglingDependencies,
  validateStructure,
} from '../../src/shared/rules/structure.js';

interface GraphTask {
  id: string;
  dependencies: string[];
  acceptance: string;
}

const defaults = RefinementConfig.parse({});
const idOf = (node: number): string => `t${node}`;

/** Tasks t0..t(n-1); `edges` are [from, to] pairs meaning "from depends on to". */
function toTasks(n: number, edges: readonly (readonly [number, number])[]): GraphTask[] {
  const dependencies = Array.from({ length: n }, () => new Set<string>());
  for (const [from, to] of edges) dependencies[from]!.add(idOf(to));
  return dependencies.map((deps, node) => ({
    id: idOf(node),
    dependencies: [...deps],
    acceptance: `finish ${idOf(node)}`,
  }));
}

/** A random digraph on 1..maxNodes nodes, self-loops and 2-cycles allowed. */
const digraph = (maxNodes: number) =>
  fc.integer({ min: 1, max: maxNodes }).chain((n) =>
    fc.record({
      n: fc.constant(n),
      edges: fc.array(fc.tuple(fc.nat(n - 1), fc.nat(n - 1)), { maxLength: n * 3 }),
    }),
  );

/** A random DAG: every edge goes from a higher index to a lower one. */
const dag = (maxNodes: number) =>
  digraph(maxNodes).map(({ n, edges }) => ({
    n,
    edges: edges
      .filter(([a, b]) => a !== b)
      .map(([a, b]): [number, number] => (a > b ? [a, b] : [b, a])),
  }));

/** Nodes reachable from `start` by one or more edges. */
function reachableFrom(start: number, adjacency: readonly number[][]): Set<number> {
  const seen = new Set<number>();
  const stack = [...adjacency[start]!];
  while (stack.length > 0) {
    const node = stack.pop()!;
    if (seen.has(node)) continue;
    seen.add(node);
    stack.push(...adjacency[node]!);
  }
  return seen;
}

function adjacencyOf(n: number, edges: readonly (readonly [number, number])[]): number[][] {
  const adjacency = Array.from({ length: n }, () => [] as number[]);
  for (const [from, to] of edges) adjacency[from]!.push(to);
  return adjacency;
}

/** Reference: Kahn's algorithm; the graph has a cycle iff it cannot consume every node. */
function kahnHasCycle(n: number, edges: readonly (readonly [number, number])[]): boolean {
  const unique = new Set(edges.map(([a, b]) => `${a}>${b}`));
  const inDegree = new Array<number>(n).fill(0);
  const adjacency = Array.from({ length: n }, () => [] as number[]);
  for (const key of unique) {
    const [a, b] = key.split('>').map(Number) as [number, number];
    adjacency[a]!.push(b);
    inDegree[b]!++;
  }
  const queue = [...inDegree.keys()].filter((node) => inDegree[node] === 0);
  let consumed = 0;
  while (queue.length > 0) {
    const node = queue.pop()!;
    consumed++;
    for (const next of adjacency[node]!) if (--inDegree[next]! === 0) queue.push(next);
  }
  return consumed < n;
}

describe('findCycles on random graphs', () => {
  it('finds no cycle in a DAG, and validateStructure accepts it', () => {
    fc.assert(
      fc.property(dag(40), ({ n, edges }) => {
        const tasks = toTasks(n, edges);
        expect(findCycles(tasks)).toEqual([]);
        expect(validateStructure(tasks, tasks, defaults).isValid).toBe(true);
      }),
    );
  });

  it('finds a cycle through both ends of a back edge added to a DAG', () => {
    fc.assert(
      fc.property(dag(40), fc.nat(), fc.nat(), ({ n, edges }, startSeed, targetSeed) => {
        // Pick u, then v among u itself and what u reaches, so that v → u closes a cycle.
        const u = startSeed % n;
        const candidates = [u, ...reachableFrom(u, adjacencyOf(n, edges))];
        const v = candidates[targetSeed % candidates.length]!;
        const tasks = toTasks(n, [...edges, [v, u]]);

        const cycles = findCycles(tasks);
        expect(cycles.some((c) => c.includes(idOf(u)) && c.includes(idOf(v)))).toBe(true);
        expect(validateStructure(tasks, tasks, defaults).isValid).toBe(false);
      }),
    );
  });

  it('agrees with Kahn on whether an arbitrary digraph has a cycle', () => {
    fc.assert(
      fc.property(digraph(20), ({ n, edges }) => {
        expect(findCycles(toTasks(n, edges)).length > 0).toBe(kahnHasCycle(n, edges));
      }),
    );
  });

  it('reports only real cycles: closed dependency paths without a repeated task', () => {
    fc.assert(
      fc.property(digraph(20), ({ n, edges }) => {
        const tasks = toTasks(n, edges);
        const dependsOn = new Map(tasks.map((t) => [t.id, new Set(t.dependencies)]));
        for (const cycle of findCycles(tasks)) {
          expect(new Set(cycle).size).toBe(cycle.length);
          cycle.forEach((id, i) => {
            const next = cycle[(i + 1) % cycle.length]!;
            expect(dependsOn.get(id)!.has(next)).toBe(true);
          });
        }
      }),
    );
  });

  it('reports one cycle per self-loop and per cyclic component of two or more tasks', () => {
    fc.assert(
      fc.property(digraph(20), ({ n, edges }) => {
        const adjacency = adjacencyOf(n, edges);
        const reach = Array.from({ length: n }, (_, node) => reachableFrom(node, adjacency));
        const selfLoops = reach.filter((r, node) => adjacency[node]!.includes(node)).length;
        // Reference components: mutual reachability, counted once by their lowest node.
        let components = 0;
        for (let node = 0; node < n; node++) {
          const mutual = [...reach[node]!].filter((other) => reach[other]!.has(node));
          const isLowest = mutual.every((other) => other >= node);
          if (isLowest && mutual.some((other) => other !== node)) components++;
        }
        expect(findCycles(toTasks(n, edges))).toHaveLength(selfLoops + components);
      }),
    );
  });

  it('finds the same cyclic tasks whatever the order of the tasks', () => {
    fc.assert(
      fc.property(
        digraph(15).chain(({ n, edges }) =>
          fc.record({
            tasks: fc.constant(toTasks(n, edges)),
            shuffled: fc.shuffledSubarray(toTasks(n, edges), { minLength: n, maxLength: n }),
          }),
        ),
        ({ tasks, shuffled }) => {
          const cyclicTasks = (list: GraphTask[]) => new Set(findCycles(list).flat());
          // Different orders may pick different representatives, so compare only whether each
          // self-loop is found and whether a cycle exists.
          expect(findCycles(shuffled).length > 0).toBe(findCycles(tasks).length > 0);
          const selfLoops = tasks.filter((t) => t.dependencies.includes(t.id)).map((t) => t.id);
          for (const id of selfLoops) expect(cyclicTasks(shuffled).has(id)).toBe(true);
        },
      ),
    );
  });
});

describe('findDanglingDependencies on random graphs', () => {
  it('reports every injected dangling id, and nothing else', () => {
    fc.assert(
      fc.property(
        dag(30),
        fc.array(fc.tuple(fc.nat(), fc.nat(5)), { maxLength: 20 }),
        ({ n, edges }, injections) => {
          const tasks = toTasks(n, edges);
          const expected = new Set<string>();
          for (const [taskSeed, ghost] of injections) {
            const target = tasks[taskSeed % n]!;
            target.dependencies.push(`ghost-${ghost}`);
            expected.add(`${target.id}>ghost-${ghost}`);
          }

          const reported = findDanglingDependencies(tasks).map((d) => `${d.taskId}>${d.dependsOn}`);
          expect(new Set(reported)).toEqual(expected);
          expect(reported).toHaveLength(expected.size);

          const validation = validateStructure(tasks, tasks, defaults);
          expect(validation.hasDanglingDependency).toBe(expected.size > 0);
          expect(validation.isValid).toBe(expected.size === 0);
        },
      ),
    );
  });
});
