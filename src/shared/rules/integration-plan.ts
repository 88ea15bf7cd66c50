import type { Task } from '../domain/task.js';

type PlanTask = Pick<Task, 'id' | 'title' | 'state' | 'dependencies' | 'result'> & {
  replanningInfo?: Pick<NonNullable<Task['replanningInfo']>, 'replacedBy'> | undefined;
};

/** The branch that holds a session's integrated work. */
export const resultBranchName = (sessionId: string) => `orq/${sessionId}/result`;

/** A task's commit to merge into the result: what its git artifact recorded when it was judged. */
export interface BranchToMerge {
  taskId: string;
  title: string;
  branch: string;
  commit: string;
  repository: string;
}

/** The git artifact of a task's last result (the command executor's), if it has one. */
export function gitArtifactOf(
  task: Pick<Task, 'result'>,
): Pick<BranchToMerge, 'branch' | 'commit' | 'repository'> | undefined {
  const meta = task.result?.artifacts.find((a) => a.kind === 'git')?.meta;
  const { branch, commit, repository } = (meta ?? {}) as Record<string, unknown>;
  if (typeof branch !== 'string' || typeof commit !== 'string' || typeof repository !== 'string')
    return undefined;
  return { branch, commit, repository };
}

/**
 * The branches to merge into a session's result, in dependency order: every DONE task whose
 * result carries a git artifact, each after the tasks it depends on (a dependency on a task
 * that has none, a skipped one or a REPLACED_BY_REPLAN one counts through that task's own
 * dependencies or its replacements), ties in the session's order. Pure: `tasks` in session
 * order.
 */
export function branchesToMerge(tasks: readonly PlanTask[]): BranchToMerge[] {
  const byId = new Map(tasks.map((t) => [t.id, t]));
  const selected = new Map<string, BranchToMerge>();
  for (const task of tasks) {
    const git = task.state === 'DONE' ? gitArtifactOf(task) : undefined;
    if (git) selected.set(task.id, { taskId: task.id, title: task.title, ...git });
  }
  /** The selected tasks `id` stands for: itself, or what it leads back to. */
  const through = (id: string, seen: Set<string>): string[] => {
    if (seen.has(id)) return [];
    seen.add(id);
    if (selected.has(id)) return [id];
    const task = byId.get(id);
    if (!task) return [];
    const next =
      task.state === 'REPLACED_BY_REPLAN'
        ? (task.replanningInfo?.replacedBy ?? [])
        : task.dependencies;
    return next.flatMap((d) => through(d, seen));
  };
  const after = new Map<string, Set<string>>();
  for (const id of selected.keys()) {
    const task = byId.get(id) as PlanTask;
    const seen = new Set<string>([id]);
    after.set(id, new Set(task.dependencies.flatMap((d) => through(d, seen))));
  }
  // Kahn's algorithm, always taking the earliest ready task in session order.
  const order: BranchToMerge[] = [];
  const done = new Set<string>();
  while (order.length < selected.size) {
    const next = [...selected.keys()].find(
      (id) => !done.has(id) && [...(after.get(id) ?? [])].every((d) => done.has(d)),
    );
    // A cycle cannot come from an accepted plan; were one there, the rest go in session order.
    const pick = next ?? [...selected.keys()].find((id) => !done.has(id));
    if (pick === undefined) break;
    done.add(pick);
    order.push(selected.get(pick) as BranchToMerge);
  }
  return order;
}

/** The failures of a session's integration: a resume runs the integration again. */
export const INTEGRATION_FAILURES = [
  'INTEGRATION_FAILED',
  'INTEGRATION_CONFLICT',
  'INTEGRATION_CHECKS_FAILED',
  'INTEGRATION_INCOMPLETE',
] as const;

/** Whether a session failed in its integration (which `resume` runs again). */
export const integrationResumable = (session: {
  state: string;
  failure?: { code: string } | undefined;
  integration?: unknown;
}): boolean =>
  session.state === 'FAILED' &&
  session.integration !== undefined &&
  (INTEGRATION_FAILURES as readonly string[]).includes(session.failure?.code ?? '');

/** Whether a finished session has work on git branches to integrate. */
export const hasGitArtifacts = (tasks: readonly PlanTask[]): boolean =>
  tasks.some((t) => t.state === 'DONE' && gitArtifactOf(t) !== undefined);

/**
 * Whether a repository path matches a resolver pattern: `*` matches within one folder, `**`
 * across folders, and a pattern without `/` matches the file's name in any folder.
 */
export function matchesPattern(path: string, pattern: string): boolean {
  const subject = pattern.includes('/') ? path : (path.split('/').at(-1) ?? path);
  let source = '';
  for (let i = 0; i < pattern.length; i += 1) {
    const c = pattern[i] as string;
    if (c === '*' && pattern[i + 1] === '*') {
      // `**/` is any number of folders, none included.
      if (pattern[i + 2] === '/') {
        source += '(?:.*/)?';
        i += 2;
      } else {
        source += '.*';
        i += 1;
      }
    } else if (c === '*') source += '[^/]*';
    else if (c === '?') source += '[^/]';
    else source += c.replace(/[.+^${}()|[\]\\]/g, '\\$&');
  }
  return new RegExp(`^${source}$`).test(subject);
}
