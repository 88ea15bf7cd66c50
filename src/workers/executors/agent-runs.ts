import { z } from 'zod';
import { git, gitOk } from './git-worktree.js';
import type { ProcessOutcome } from './process.js';

/** Of the agent's output, what the record keeps (the result shows a tail of this size). */
const RECORDED_OUTPUT_CHARS = 4000;

/**
 * What one finished agent run of an attempt left: its outcome, kept in the repository so a
 * redelivery of the same attempt can use it instead of running the agent again (issue 35).
 */
const AgentRun = z.object({
  exitCode: z.number().int().nullable(),
  timedOut: z.boolean(),
  durationMs: z.number().nonnegative(),
  output: z.string(),
});
type AgentRun = z.infer<typeof AgentRun>;

/**
 * Where round `round` of attempt `attempt` on `branch` is recorded: a commit whose parent is the
 * commit the run ended with and whose message is the outcome as JSON. Beside
 * refs/orq/<branch>/attempt-<n> (git-worktree.ts), never under it: a ref cannot be a folder too.
 */
const runRef = (branch: string, attempt: number, round: number) =>
  `refs/orq/${branch}/agent-run-${attempt}-${round}`;

/**
 * Records that the agent's round `round` of `attempt` ended with `head` committed on the task
 * branch, and how. Written after the commit, so a record always names a commit that exists.
 */
export async function recordAgentRun(
  worktree: string,
  branch: string,
  attempt: number,
  round: number,
  outcome: ProcessOutcome,
): Promise<void> {
  const run: AgentRun = {
    exitCode: outcome.exitCode,
    timedOut: outcome.timedOut,
    durationMs: outcome.durationMs,
    output: outcome.output.slice(-RECORDED_OUTPUT_CHARS),
  };
  const record = await gitOk(
    ['commit-tree', 'HEAD^{tree}', '-p', 'HEAD', '-m', JSON.stringify(run)],
    worktree,
  );
  await gitOk(['update-ref', runRef(branch, attempt, round), record], worktree);
}

/**
 * The outcome of round `round` of `attempt` when an earlier delivery of the attempt finished it
 * and its commit is on the task branch (the worktree's HEAD): the agent need not run again.
 * Undefined when there is no such record, or its commit is no longer on the branch.
 */
export async function finishedAgentRun(
  worktree: string,
  branch: string,
  attempt: number,
  round: number,
): Promise<{ outcome: ProcessOutcome; commit: string } | undefined> {
  const ref = runRef(branch, attempt, round);
  const commit = await git(['rev-parse', '--verify', '--quiet', `${ref}^^{commit}`], worktree);
  if (commit.code !== 0 || !commit.stdout.trim()) return undefined;
  const head = commit.stdout.trim();
  if ((await git(['merge-base', '--is-ancestor', head, 'HEAD'], worktree)).code !== 0) {
    return undefined;
  }
  const message = await git(['log', '-1', '--format=%B', ref], worktree);
  let parsed: unknown;
  try {
    parsed = JSON.parse(message.stdout);
  } catch {
    return undefined;
  }
  const run = AgentRun.safeParse(parsed).data;
  if (!run) return undefined;
  return {
    commit: head,
    outcome: { ...run, aborted: false, truncatedBytes: 0 },
  };
}
