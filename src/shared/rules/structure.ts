import type { RefinementConfig } from '../config/schema.js';
import type {
  RequiredTerms,
  StructureValidation,
  TermPreservationResult,
} from '../domain/refinement.js';
import { validateTermPreservation } from './terms.js';
import type { TaskText } from './terms.js';

/**
 * Structure validation of a replan (seed 000 "構造検証", extended by seed 002). Pure: the
 * coordinator passes the previous and the proposed tasks and stores the verdict with its reasons.
 */

/** What the dependency rules read of a task; PlannedTask and Task both fit. */
export interface DependencyNode {
  id: string;
  dependencies?: readonly string[];
}

/** A task as validateStructure reads it: its place in the graph and its text. */
export interface StructureTask extends DependencyNode, TaskText {}

/** A dependency naming a task that is not in the plan. */
export interface DanglingDependency {
  taskId: string;
  dependsOn: string;
}

export type StructureConfig = Pick<
  RefinementConfig,
  | 'taskCountChangeThreshold'
  | 'taskCountChangeMinAbsolute'
  | 'enableTermPreservationCheck'
  | 'treatTermLossAsStructureBreak'
  | 'minPreservationRate'
  | 'customRequiredTerms'
>;

interface DependencyGraph {
  /** Distinct task ids, in order of first appearance. */
  ids: string[];
  /** For each node, the distinct nodes it depends on (dependencies on unknown ids left out). */
  edges: number[][];
}

/** One node per distinct id; a repeated id merges its dependencies into the first one's node. */
function buildGraph(tasks: readonly DependencyNode[]): DependencyGraph {
  const nodeOf = new Map<string, number>();
  const ids: string[] = [];
  for (const task of tasks) {
    if (!nodeOf.has(task.id)) {
      nodeOf.set(task.id, ids.length);
      ids.push(task.id);
    }
  }
  const edgeSets = ids.map(() => new Set<number>());
  for (const task of tasks) {
    const from = nodeOf.get(task.id)!;
    for (const dependency of task.dependencies ?? []) {
      const to = nodeOf.get(dependency);
      if (to !== undefined) edgeSets[from]!.add(to);
    }
  }
  return { ids, edges: edgeSets.map((set) => [...set]) };
}

/**
 * Tarjan's strongly connected components, iterative so that a 10,000-task chain cannot overflow
 * the call stack. Returns the component number of every node.
 */
function stronglyConnectedComponents(edges: readonly (readonly number[])[]): Int32Array {
  const count = edges.length;
  const UNVISITED = -1;
  const order = new Int32Array(count).fill(UNVISITED);
  const low = new Int32Array(count);
  const component = new Int32Array(count).fill(UNVISITED);
  const onStack = new Uint8Array(count);
  const sccStack: number[] = [];
  // The explicit call stack: a node and the position of the next edge to follow from it.
  const callNodes: number[] = [];
  const callEdge: number[] = [];
  let nextOrder = 0;
  let nextComponent = 0;

  for (let root = 0; root < count; root++) {
    if (order[root] !== UNVISITED) continue;
    order[root] = low[root] = nextOrder++;
    sccStack.push(root);
    onStack[root] = 1;
    callNodes.push(root);
    callEdge.push(0);

    while (callNodes.length > 0) {
      const top = callNodes.length - 1;
      const node = callNodes[top]!;
      const nodeEdges = edges[node]!;
      const edgeIndex = callEdge[top]!;

      if (edgeIndex < nodeEdges.length) {
        callEdge[top] = edgeIndex + 1;
        const next = nodeEdges[edgeIndex]!;
        if (order[next] === UNVISITED) {
          order[next] = low[next] = nextOrder++;
          sccStack.push(next);
          onStack[next] = 1;
          callNodes.push(next);
          callEdge.push(0);
        } else if (onStack[next]) {
          low[node] = Math.min(low[node]!, order[next]!);
        }
        continue;
      }

      // Every edge of `node` followed: close its component if it is a root, then return.
      if (low[node] === order[node]) {
        let member: number;
        do {
          member = sccStack.pop()!;
          onStack[member] = 0;
          component[member] = nextComponent;
        } while (member !== node);
        nextComponent++;
      }
      callNodes.pop();
      callEdge.pop();
      const parent = callNodes[callNodes.length - 1];
      if (parent !== undefined) low[parent] = Math.min(low[parent]!, low[node]!);
    }
  }
  return component;
}

/**
 * A shortest cycle of two or more nodes through `start`, staying inside its component
 * (breadth-first, so also iterative). `start` must belong to a component of two or more nodes.
 */
function cycleThrough(
  start: number,
  edges: readonly (readonly number[])[],
  component: Int32Array,
): number[] {
  const target = component[start]!;
  const parent = new Map<number, number>([[start, start]]);
  const queue = [start];
  for (let head = 0; head < queue.length; head++) {
    const node = queue[head]!;
    for (const next of edges[node]!) {
      if (next === node || component[next] !== target) continue; // self-loops are reported apart
      if (next === start) {
        const path = [node];
        while (path[path.length - 1] !== start) path.push(parent.get(path[path.length - 1]!)!);
        return path.reverse();
      }
      if (!parent.has(next)) {
        parent.set(next, node);
        queue.push(next);
      }
    }
  }
  // Unreachable for a component of two or more nodes: it is strongly connected.
  throw new Error(`no cycle through node ${start} inside its component`);
}

/**
 * The dependency cycles among the tasks, as task ids along each cycle: `[a, b, c]` means a
 * depends on b, b on c and c on a; a self-dependency is `[a]`.
 *
 * Reported: every self-dependency, and for every strongly connected component of two or more
 * tasks one shortest cycle through its first task (in input order), so every cyclic part of
 * the graph is named without enumerating the exponentially many cycles it may hold. Sorted by
 * the input position of the first task; a self-dependency comes before a longer cycle there.
 * Dependencies on unknown ids are ignored here (see findDanglingDependencies).
 */
export function findCycles(tasks: readonly DependencyNode[]): string[][] {
  const { ids, edges } = buildGraph(tasks);
  const component = stronglyConnectedComponents(edges);

  const componentSize = new Map<number, number>();
  for (const c of component) componentSize.set(c, (componentSize.get(c) ?? 0) + 1);

  const found: { start: number; nodes: number[] }[] = [];
  const componentsSeen = new Set<number>();
  // Nodes are visited in input order, so the first node of a component is its lowest.
  for (let node = 0; node < ids.length; node++) {
    if (edges[node]!.includes(node)) found.push({ start: node, nodes: [node] });
    const c = component[node]!;
    if (componentSize.get(c)! > 1 && !componentsSeen.has(c)) {
      componentsSeen.add(c);
      found.push({ start: node, nodes: cycleThrough(node, edges, component) });
    }
  }
  return found.map(({ nodes }) => nodes.map((n) => ids[n]!));
}

/**
 * Each dependency on an id that no task has, in task order; a dependency repeated inside one
 * task is reported once.
 */
export function findDanglingDependencies(tasks: readonly DependencyNode[]): DanglingDependency[] {
  const known = new Set(tasks.map((t) => t.id));
  const dangling: DanglingDependency[] = [];
  for (const task of tasks) {
    for (const dependsOn of new Set(task.dependencies ?? [])) {
      if (!known.has(dependsOn)) dangling.push({ taskId: task.id, dependsOn });
    }
  }
  return dangling;
}

/** Ids that more than one task carries, with how many carry each, in order of first use. */
function findDuplicateIds(tasks: readonly DependencyNode[]): { id: string; count: number }[] {
  const counts = new Map<string, number>();
  for (const task of tasks) counts.set(task.id, (counts.get(task.id) ?? 0) + 1);
  return [...counts].filter(([, count]) => count > 1).map(([id, count]) => ({ id, count }));
}

/**
 * Seed 000: relative change of the task count, |new - old| / old.
 *
 * With no previous tasks the ratio is undefined; it is taken as 0 when both plans are empty
 * (nothing changed) and 1 otherwise (the whole plan is new). 1 rather than Infinity keeps the
 * value a finite fraction that serialises to JSON, and the absolute-difference rule still
 * decides: going from 0 to 1 or 2 tasks does not exceed the default minimum of 2.
 */
export function taskCountChangeRate(originalCount: number, newCount: number): number {
  if (originalCount === 0) return newCount === 0 ? 0 : 1;
  return Math.abs(newCount - originalCount) / originalCount;
}

function formatPercent(rate: number): string {
  return `${Number((rate * 100).toFixed(2))}%`;
}

function quoteList(items: readonly string[]): string {
  return items.map((item) => `"${item}"`).join(', ');
}

/**
 * Seed 000 + 002: does the proposed plan keep the structure of the previous one?
 *
 * Broken when any of these holds (each adds a sentence to `problems` naming the ids or terms):
 * - the task count changed by more than `taskCountChangeThreshold` AND by more than
 *   `taskCountChangeMinAbsolute` tasks (both strict, so exactly at a limit is fine);
 * - a task depends on an id that is not in the new plan;
 * - the dependencies form a cycle (a self-dependency included);
 * - two tasks share an id;
 * - term loss counts as a break (`treatTermLossAsStructureBreak`) and the preservation rate is
 *   below `minPreservationRate` (exactly at the minimum is fine).
 *
 * Term preservation is checked only when `requiredTerms` is given and
 * `enableTermPreservationCheck` is on; it covers the required terms plus
 * `customRequiredTerms`. Any missing term sets `hasTermLoss` (a warning for the caller to
 * record) whether or not it breaks the structure.
 */
export function validateStructure(
  originalTasks: readonly unknown[],
  newTasks: readonly StructureTask[],
  config: StructureConfig,
  requiredTerms?: RequiredTerms,
): StructureValidation {
  const problems: string[] = [];

  const oldCount = originalTasks.length;
  const newCount = newTasks.length;
  const taskCountChange = taskCountChangeRate(oldCount, newCount);
  const absoluteChange = Math.abs(newCount - oldCount);
  if (
    taskCountChange > config.taskCountChangeThreshold &&
    absoluteChange > config.taskCountChangeMinAbsolute
  ) {
    problems.push(
      `Task count changed from ${oldCount} to ${newCount} (${formatPercent(taskCountChange)}, ` +
        `${absoluteChange} tasks), more than both limits: ` +
        `${formatPercent(config.taskCountChangeThreshold)} and ${config.taskCountChangeMinAbsolute} tasks.`,
    );
  }

  for (const { id, count } of findDuplicateIds(newTasks)) {
    problems.push(`Task id "${id}" is used by ${count} tasks; task ids must be unique.`);
  }

  const danglingDependencies = findDanglingDependencies(newTasks);
  for (const { taskId, dependsOn } of danglingDependencies) {
    problems.push(`Task "${taskId}" depends on "${dependsOn}", which is not in the plan.`);
  }

  const cycles = findCycles(newTasks);
  for (const cycle of cycles) {
    problems.push(
      cycle.length === 1
        ? `Task "${cycle[0]}" depends on itself.`
        : `Dependency cycle: ${[...cycle, cycle[0]].map((id) => `"${id}"`).join(' → ')} ` +
            `(each task depends on the next).`,
    );
  }

  let termPreservation: StructureValidation['termPreservation'];
  let hasTermLoss = false;
  if (requiredTerms && config.enableTermPreservationCheck) {
    termPreservation = validateTermPreservation(requiredTerms, newTasks, config);
    hasTermLoss = termPreservation.missing.length > 0;
    if (
      config.treatTermLossAsStructureBreak &&
      termPreservation.preservationRate < config.minPreservationRate
    ) {
      problems.push(
        `Required terms missing after replan: ${quoteList(termPreservation.missing)} ` +
          `(kept ${formatPercent(termPreservation.preservationRate)}, ` +
          `minimum ${formatPercent(config.minPreservationRate)}).`,
      );
    }
  }

  return {
    isValid: problems.length === 0,
    taskCountChange,
    hasCircularDependency: cycles.length > 0,
    hasDanglingDependency: danglingDependencies.length > 0,
    cycles,
    danglingDependencies,
    ...(termPreservation ? { termPreservation } : {}),
    hasTermLoss,
    problems,
  };
}

/** The verdict on the required terms of a task-level replan (validateReplacementTerms). */
export interface ReplacementTerms {
  /** Over the terms the replaced task carried; absent when the check is off. */
  termPreservation?: TermPreservationResult;
  hasTermLoss: boolean;
  /** With treatTermLossAsStructureBreak: the subtasks keep too few of them to be used. */
  problem?: string;
}

/**
 * Seed 002 applied to seed 001's task replans: the required terms the replaced task carried
 * that none of its subtasks carries. A term the task never carried is not the Replanner's to
 * keep (other tasks cover it), so only the task's own terms count. Pure.
 */
export function validateReplacementTerms(
  requiredTerms: RequiredTerms,
  original: TaskText,
  subtasks: readonly TaskText[],
  config: StructureConfig,
): ReplacementTerms {
  if (!config.enableTermPreservationCheck) return { hasTermLoss: false };
  const carried = validateTermPreservation(requiredTerms, [original], config).preserved;
  const termPreservation = validateTermPreservation({ ...requiredTerms, terms: carried }, subtasks);
  const hasTermLoss = termPreservation.missing.length > 0;
  const breaks =
    config.treatTermLossAsStructureBreak &&
    termPreservation.preservationRate < config.minPreservationRate;
  return {
    termPreservation,
    hasTermLoss,
    ...(breaks
      ? {
          problem:
            `Required terms missing after replan: ${quoteList(termPreservation.missing)} ` +
            `(the subtasks keep ${formatPercent(termPreservation.preservationRate)} of the ` +
            `task's, minimum ${formatPercent(config.minPreservationRate)}).`,
        }
      : {}),
  };
}

/** What taskCapProblem reads: the session's task records now, and those a plan would add. */
export interface TaskCapInput {
  /** Task records the session holds (0 for a plan: it replaces none). */
  held: number;
  /** Tasks the plan or the Replanner's subtasks would add. */
  added: number;
  /** budget.maxTasks. */
  maxTasks: number;
}

/**
 * Why the plan or the subtasks cannot be stored, or undefined: the session would hold more
 * tasks than budget.maxTasks, the bound that keeps one transition's Redis script short. Pure.
 */
export function taskCapProblem({ held, added, maxTasks }: TaskCapInput): string | undefined {
  const total = held + added;
  if (total <= maxTasks) return undefined;
  const count = (n: number) => n.toLocaleString('en-US');
  const allowed = `more than budget.maxTasks allows (${count(maxTasks)})`;
  return held === 0
    ? `the plan has ${count(added)} tasks, ${allowed}`
    : `${count(added)} subtasks would bring the session to ${count(total)} tasks, ${allowed}`;
}
