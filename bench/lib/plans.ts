import type { PlannedTask } from '../../src/shared/domain/plan.js';
import { integer, seededRng } from './random.js';

/**
 * Plan shapes for the benchmarks, as the Planner would return them. Pure and deterministic:
 * the same arguments give the same plan, so runs are comparable.
 */

export type BenchTask = Pick<PlannedTask, 'id' | 'title' | 'acceptance' | 'dependencies'>;

const pad = (n: number) => String(n).padStart(5, '0');

function task(id: string, dependencies: string[] = []): BenchTask {
  return { id, title: `Task ${id}`, acceptance: `${id} is done`, dependencies };
}

/** n tasks without dependencies (the overhead and scaling benchmarks). */
export function independentTasks(n: number): BenchTask[] {
  return Array.from({ length: n }, (_, i) => task(`t${pad(i)}`));
}

/** t0 → t1 → … → t(n-1): each task waits for the one before. */
export function chain(n: number): BenchTask[] {
  return Array.from({ length: n }, (_, i) => task(`t${pad(i)}`, i > 0 ? [`t${pad(i - 1)}`] : []));
}

/** One root and `width` tasks that all depend on it (1 + width tasks). */
export function fanOut(width: number): BenchTask[] {
  return [task('root'), ...Array.from({ length: width }, (_, i) => task(`t${pad(i)}`, ['root']))];
}

/**
 * A diamond lattice: `layers` layers of `width` tasks; task (l, i) depends on tasks (l-1, i)
 * and (l-1, i+1 mod width) of the layer before, so every inner task has in- and out-degree 2.
 */
export function lattice(layers: number, width: number): BenchTask[] {
  const id = (l: number, i: number) => `l${l}_${i}`;
  const tasks: BenchTask[] = [];
  for (let l = 0; l < layers; l += 1) {
    for (let i = 0; i < width; i += 1) {
      const deps = l === 0 ? [] : [...new Set([id(l - 1, i), id(l - 1, (i + 1) % width)])];
      tasks.push(task(id(l, i), deps));
    }
  }
  return tasks;
}

/**
 * A random DAG of n tasks with bounded in-degree: task i depends on 0..maxInDegree distinct
 * tasks among the `window` tasks before it. The window keeps the out-degree distribution the
 * same whatever n is, so costs per task can be compared across sizes.
 */
export function randomDag(n: number, seed: number, maxInDegree = 3, window = 64): BenchTask[] {
  const rng = seededRng(seed);
  return Array.from({ length: n }, (_, i) => {
    const deps = new Set<string>();
    const wanted = i === 0 ? 0 : integer(rng, 0, Math.min(maxInDegree, i));
    const from = Math.max(0, i - window);
    while (deps.size < wanted) deps.add(`t${pad(integer(rng, from, i - 1))}`);
    return task(`t${pad(i)}`, [...deps]);
  });
}
