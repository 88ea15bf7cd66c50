/**
 * Critical path (issue 33): for each task, the number of tasks in the longest chain of
 * dependents behind it, itself included. A leaf counts 1. Among ready tasks the coordinator
 * releases the longest first, so a session with more ready tasks than slots ends sooner
 * (longest-path-first list scheduling).
 */
export interface PathNode {
  id: string;
  /** Ids of the tasks that depend on this one. Unknown ids are ignored. */
  dependents: readonly string[];
}

/**
 * Critical-path length of every node. `fixed` gives lengths already known for tasks outside
 * `nodes` (a replan's subtasks point at dependents stored earlier). Assumes no cycle (plans with
 * one are refused before this runs); a cycle would count each of its nodes once.
 */
export function criticalPaths(
  nodes: readonly PathNode[],
  fixed: ReadonlyMap<string, number> = new Map(),
): Map<string, number> {
  const byId = new Map(nodes.map((n) => [n.id, n]));
  const lengths = new Map<string, number>();
  const visiting = new Set<string>();
  // Iterative depth-first walk: a chain of 10,000 tasks would overflow a recursive one.
  for (const root of nodes) {
    if (lengths.has(root.id)) continue;
    const stack: { id: string; next: number }[] = [{ id: root.id, next: 0 }];
    visiting.add(root.id);
    while (stack.length > 0) {
      const frame = stack[stack.length - 1] as { id: string; next: number };
      const node = byId.get(frame.id) as PathNode;
      const child = node.dependents[frame.next];
      if (child !== undefined) {
        frame.next += 1;
        if (byId.has(child) && !lengths.has(child) && !visiting.has(child)) {
          visiting.add(child);
          stack.push({ id: child, next: 0 });
        }
        continue;
      }
      let longest = 0;
      for (const d of node.dependents) {
        longest = Math.max(longest, lengths.get(d) ?? fixed.get(d) ?? 0);
      }
      lengths.set(frame.id, longest + 1);
      visiting.delete(frame.id);
      stack.pop();
    }
  }
  return lengths;
}

export interface SlotCandidate {
  id: string;
  criticalPath?: number | undefined;
}

/**
 * Which ready tasks to dispatch when `free` slots are open: the longest critical paths first,
 * ties by id so every coordinator picks alike. `free` ≤ 0 picks none; Infinity picks all. With
 * `spread`, the `free` are drawn at random from the first `free + spread`, so coordinators
 * refilling one session at the same moment seldom draw the same task.
 */
export function pickForSlots<T extends SlotCandidate>(
  candidates: readonly T[],
  free: number,
  spread = 0,
  random: () => number = Math.random,
): T[] {
  if (free <= 0) return [];
  const ordered = [...candidates].sort(
    (a, b) =>
      (b.criticalPath ?? 1) - (a.criticalPath ?? 1) || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0),
  );
  if (spread <= 0 || ordered.length <= free) return ordered.slice(0, free);
  const window = ordered.slice(0, free + spread);
  const picked: T[] = [];
  while (picked.length < free) {
    const [one] = window.splice(Math.floor(random() * window.length), 1);
    if (one) picked.push(one);
  }
  return picked;
}

/** The sorted-set score of a waiting task: lowest first (ZRANGE), so the longest path first. */
export const waitingScore = (criticalPath: number | undefined): number => -(criticalPath ?? 1);
