import { z } from 'zod';
import { FALLBACK_IDENTITY } from './git-identity.js';
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
 * Where round `round` of attempt `attempt` on `branch` is recorded: a commit whose tree is what
 * the run left (all of it, staged), whose parent is the commit the task branch was at when the
 * run ended, and whose message is the outcome as JSON. Beside refs/orq/<branch>/attempt-<n>
 * (git-worktree.ts), never under it: a ref cannot be a folder too.
 */
const runRef = (branch: string, attempt: number, round: number) =>
  `refs/orq/${branch}/agent-run-${attempt}-${round}`;

/**
 * The record is orq's bookkeeping, on no branch: made as orq whatever the repository's identity,
 * so an identity git refuses (or none) cannot lose a finished run.
 */
const RECORD_IDENTITY = [
  '-c',
  `user.name=${FALLBACK_IDENTITY.name}`,
  '-c',
  `user.email=${FALLBACK_IDENTITY.email}`,
];

/**
 * Records that the agent's round `round` of `attempt` ended, how, and what it left in the
 * worktree. Written before orq commits that work: whatever happens to the commit (a pod killed,
 * a commit git refuses), the next delivery finds the run and does not run the agent again.
 * Leaves everything staged.
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
  await gitOk(['add', '-A'], worktree);
  const tree = await gitOk(['write-tree'], worktree);
  const record = await gitOk(
    [...RECORD_IDENTITY, 'commit-tree', tree, '-p', 'HEAD', '-m', JSON.stringify(run)],
    worktree,
  );
  await gitOk(['update-ref', runRef(branch, attempt, round), record], worktree);
}

export interface FinishedAgentRun {
  outcome: ProcessOutcome;
  /**
   * The commit of the task branch that holds the run's work; undefined when the run was
   * recorded but its work not committed (the delivery ended in between): then the worktree's
   * HEAD is where the run ended, and `restoreAgentRun` brings its work back to be committed.
   */
  commit: string | undefined;
  /** The record, for `restoreAgentRun`. */
  record: string;
}

/**
 * The outcome of round `round` of `attempt` when an earlier delivery of the attempt finished it
 * and the branch (the worktree's HEAD) is where it left it, or went on from there: the agent
 * need not run again. Undefined when there is no such record, or the branch no longer holds
 * where the run ended.
 */
export async function finishedAgentRun(
  worktree: string,
  branch: string,
  attempt: number,
  round: number,
): Promise<FinishedAgentRun | undefined> {
  const ref = runRef(branch, attempt, round);
  const found = await git(['rev-parse', '--verify', '--quiet', `${ref}^{commit}`], worktree);
  if (found.code !== 0 || !found.stdout.trim()) return undefined;
  const record = found.stdout.trim();
  const [ended, tree] = (await gitOk(['log', '-1', '--format=%P %T', record], worktree)).split(' ');
  if (!ended || !tree) return undefined;
  if ((await git(['merge-base', '--is-ancestor', ended, 'HEAD'], worktree)).code !== 0) {
    return undefined;
  }
  const message = await git(['log', '-1', '--format=%B', record], worktree);
  let parsed: unknown;
  try {
    parsed = JSON.parse(message.stdout);
  } catch {
    return undefined;
  }
  const run = AgentRun.safeParse(parsed).data;
  if (!run) return undefined;
  const outcome = { ...run, aborted: false, truncatedBytes: 0 };
  const commit = await commitHolding(worktree, ended, tree);
  if (commit === undefined && (await gitOk(['rev-parse', 'HEAD'], worktree)) !== ended) {
    // The branch went on from where the run ended without its work: run it again.
    return undefined;
  }
  return { outcome, commit, record };
}

/**
 * The commit at or after `ended` on the branch whose tree is the run's `tree`: `ended` itself
 * when the run left nothing to commit, else the commit orq made of what it left.
 */
async function commitHolding(
  worktree: string,
  ended: string,
  tree: string,
): Promise<string | undefined> {
  const commits = await gitOk(
    ['log', '--reverse', '--ancestry-path', '--format=%H %T', `${ended}..HEAD`],
    worktree,
  );
  const withTree = [`${ended} ${await gitOk(['rev-parse', `${ended}^{tree}`], worktree)}`]
    .concat(commits ? commits.split('\n') : [])
    .find((line) => line.endsWith(` ${tree}`));
  return withTree?.split(' ')[0];
}

/**
 * Puts what a recorded run left back into the worktree (at the commit the run ended on) and
 * stages it, to be committed as if the agent had just ended.
 */
export async function restoreAgentRun(worktree: string, record: string): Promise<void> {
  await gitOk(['read-tree', '-u', '--reset', `${record}^{tree}`], worktree);
}
