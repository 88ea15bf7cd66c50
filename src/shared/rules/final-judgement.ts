import {
  finalJudgementTaskId,
  type FinalVerdict,
  type IntegrationOutcome,
} from '../domain/integration.js';
import { Task, type TaskJudgement } from '../domain/task.js';

/** What the final judge sees of an integrated result branch. */
export interface FinalJudgementInput {
  round: number;
  /** Seed 002's required terms of the instruction. */
  requiredTerms: string[];
  branch: string;
  commit: string;
  /** `git diff --stat` of the result against its base. */
  diffStat: string;
  /** The tasks merged, by id and title. */
  tasks: { taskId: string; title: string }[];
  checks: { name: string; mode: string; passed: boolean; output?: string | undefined }[];
}

/** Of a failed check's output, what the fix task's context keeps. */
const CHECK_OUTPUT_CHARS = 2000;

/** The checks that failed on the result and are not only warnings. */
export const blockingFailures = (outcome: Pick<IntegrationOutcome, 'checks'>) =>
  outcome.checks.filter((c) => !c.passed && c.mode !== 'warn');

/** What the final judge of round `round` sees of the result branch. Pure. */
export function finalJudgementInput(
  outcome: IntegrationOutcome,
  round: number,
  requiredTerms: readonly string[],
): FinalJudgementInput {
  return {
    round,
    requiredTerms: [...requiredTerms],
    branch: outcome.branch,
    commit: outcome.commit ?? '',
    diffStat: outcome.diffStat,
    tasks: outcome.tasks.map((t) => ({ taskId: t.taskId, title: t.title })),
    checks: outcome.checks.map((c) => ({
      name: c.name,
      mode: c.mode,
      passed: c.passed,
      output: c.output,
    })),
  };
}

/**
 * The task the final judge is asked about: the whole instruction, on the result branch. Its id
 * is the one a fix round's task takes (fixTask), so a scenario scripts both under one name.
 */
export function resultTask(instruction: string, outcome: IntegrationOutcome, round: number): Task {
  return Task.parse({
    id: finalJudgementTaskId(round),
    title: `The instruction, as merged on ${outcome.branch}`,
    acceptance: `The result branch does what the instruction asks, as one reviewable change, and every blocking check passes on it:\n${instruction}`,
    state: 'DONE',
  });
}

/**
 * The final verdict from the judge's judgement: done only when the judge says so and no
 * blocking check failed (a judge that overlooks a failing check does not complete the
 * session); what is missing is the judge's list, with each failing check the judge did not
 * name. Pure.
 */
export function finalVerdict(
  judgement: TaskJudgement,
  outcome: IntegrationOutcome,
  round: number,
): FinalVerdict {
  const failed = blockingFailures(outcome);
  const named = judgement.missingRequirements.join('\n');
  const unnamed = failed
    .filter((c) => !named.includes(c.name))
    .map(
      (c) => `Make the check ${c.name} pass on the merged tree (exit code ${c.exitCode ?? 'none'})`,
    );
  const done = judgement.success && failed.length === 0;
  const said = judgement.reason.trim() || 'no reason given';
  const listed = [...judgement.missingRequirements, ...unnamed];
  // Not done with nothing listed: the reason is all there is to work from.
  const missing = done
    ? []
    : listed.length > 0
      ? listed
      : [`What the final judge found wanting: ${said}`];
  return {
    round,
    done,
    reason:
      judgement.success && failed.length > 0
        ? `the judge found it done, but check(s) ${failed.map((c) => c.name).join(', ')} fail on the result branch (judge: ${said})`
        : said,
    missing,
  };
}

/**
 * What the final judge found missing, as a task for the Replanner to split (seed 001): its
 * subtasks start from the result branch (the command executor merges it in first), replace it
 * in the task graph, and must keep the required terms its text carries (seed 002). Pure.
 */
export function fixTask(
  verdict: FinalVerdict,
  outcome: IntegrationOutcome,
  judgement: TaskJudgement,
  maxIterations: number,
): Task {
  const failed = blockingFailures(outcome);
  const checkOutput = failed
    .map(
      (c) =>
        `Check ${c.name} (${c.mode}), exit code ${c.exitCode ?? 'none'}:\n${(c.output ?? '').slice(-CHECK_OUTPUT_CHARS)}`,
    )
    .join('\n\n');
  return Task.parse({
    id: finalJudgementTaskId(verdict.round),
    title: `Complete the result: what the final judgement of round ${verdict.round} found missing`,
    acceptance: verdict.missing.map((m) => `- ${m}`).join('\n'),
    context: [
      `The tasks' work is merged on ${outcome.branch} at ${(outcome.commit ?? '').slice(0, 12)}; work from there.`,
      `What it changes against its base:\n${outcome.diffStat || '(no changes)'}`,
      ...(checkOutput ? [`The checks that failed on it:\n${checkOutput}`] : []),
    ].join('\n\n'),
    state: 'RUNNING',
    attempts: 1,
    replanPending: true,
    judgement,
    result: {
      output: `Final judgement of round ${verdict.round}: ${verdict.reason}`,
      log: checkOutput,
    },
    replanningInfo: { iteration: 0, maxIterations },
    criticalPath: 1,
  });
}
