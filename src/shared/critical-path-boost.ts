/*
 * The critical path's lead in fair release and in the quota line, kept apart from
 * fair-release.ts (which holds Redis scripts) so that the pure quota line, and the CLI's start-up
 * through it, load no Redis client.
 */

/**
 * How far, in SFQ tag units, a critical path can move a work job ahead: every work job is placed
 * this much behind its tag, less its path's boost. The cost to other sessions is bounded: a
 * session whose jobs all have long paths is served as if its tags were this much lower, a burst
 * of at most this many tag units, once; its share over time does not change. 256 rather than
 * 64: with 64, a path twice as long went ahead of only 6 of its session's queued jobs, and
 * 300-task DAGs ran 1.18x their lower bound, as first come first served does (1.19-1.31 in a
 * simulation); with 256, 1.14 (docs/fairness.md).
 */
export const CRITICAL_PATH_ROOM = 256;
/** Paths of this many tasks or more take all the room. */
const LONGEST_PATH_APART = 1024;

/**
 * The boost of a job whose task has `criticalPath` tasks on its longest chain (itself included):
 * on a log scale, so paths from 1 to LONGEST_PATH_APART tasks stay apart (a path twice as long
 * is about 26 units ahead). A path of 1 (a leaf, or no path known) has none.
 */
export function criticalPathBoost(criticalPath = 1): number {
  const scaled =
    (CRITICAL_PATH_ROOM * Math.log2(Math.max(1, criticalPath))) / Math.log2(LONGEST_PATH_APART);
  return Math.min(CRITICAL_PATH_ROOM, Math.round(scaled));
}
