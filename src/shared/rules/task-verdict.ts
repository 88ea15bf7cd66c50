import type { TaskJudgement } from '../domain/task.js';

/**
 * The task judge's verdict as one word, with the precedence of task-outcome.ts: success wins,
 * then continue, then replan; none of the three flags is BLOCKED (seed 001).
 */
export type TaskVerdict = 'done' | 'continue' | 'replan' | 'blocked';

/** Verdicts that are costly and hard to undo: a replan replaces the task, blocked stops it. */
export type CostlyVerdict = Extract<TaskVerdict, 'replan' | 'blocked'>;

export function verdictOf(
  judgement: Pick<TaskJudgement, 'success' | 'shouldContinue' | 'shouldReplan'>,
): TaskVerdict {
  if (judgement.success) return 'done';
  if (judgement.shouldContinue) return 'continue';
  if (judgement.shouldReplan) return 'replan';
  return 'blocked';
}

export type Confirmation =
  { settled: true; index: number; reason: string } | { settled: false; reason: string };

/**
 * Issue 38: a costly verdict stands only when a second opinion confirms it. Given the verdicts
 * so far (first, second, maybe a third): settled with the index of the judgement to use, or
 * not yet (ask once more). Two that disagree are broken by a third, the majority wins; when all
 * three differ, the first that is not costly (so the task is neither replaced nor stopped on
 * one vote).
 */
export function confirmVerdict(
  verdicts: readonly TaskVerdict[],
  confirm: readonly CostlyVerdict[],
): Confirmation {
  const [first, second, third] = verdicts;
  if (first === undefined) throw new RangeError('no task verdict to confirm');
  const costly = (v: TaskVerdict) => (confirm as readonly TaskVerdict[]).includes(v);
  if (!costly(first)) return { settled: true, index: 0, reason: `${first} needs no confirmation` };
  if (second === undefined) {
    return { settled: false, reason: `${first} is costly: asking for a second opinion` };
  }
  if (second === first) {
    return { settled: true, index: 0, reason: `${first} confirmed by a second opinion` };
  }
  if (third === undefined) {
    return {
      settled: false,
      reason: `the second opinion says ${second}, not ${first}: asking a third`,
    };
  }
  const majority = verdicts.findIndex((v, i) => verdicts.indexOf(v) !== i);
  if (majority >= 0) {
    const index = verdicts.indexOf(verdicts[majority] as TaskVerdict);
    return {
      settled: true,
      index,
      reason: `${verdicts.join(', ')}: ${verdicts[index]} by majority`,
    };
  }
  const index = Math.max(
    verdicts.findIndex((v) => !costly(v)),
    0,
  );
  return {
    settled: true,
    index,
    reason: `${verdicts.join(', ')} all differ: ${verdicts[index]}, the first that is not costly`,
  };
}
