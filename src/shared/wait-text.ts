import type { HistoryEntry } from './domain/history.js';
import type { StepApprovalWait } from './domain/human-wait.js';

type WaitEntry = Extract<HistoryEntry, { type: 'wait' }>;

/** What a step approval would run: its command line, or the tool with its input as JSON. */
export const stepText = (wait: StepApprovalWait): string =>
  wait.command !== undefined ? wait.command : `${wait.tool} ${JSON.stringify(wait.input)}`;

const short = (text: string, max = 100): string => {
  const line = text.replace(/\s+/g, ' ').trim();
  return line.length > max ? `${line.slice(0, max - 1)}…` : line;
};

/**
 * A wait's history entry in words, for the CLI's progress lines and the session view alike:
 * `waiting for a person: plan approval (plan-0)`, `plan approval (plan-0) approved by cli`,
 * `question (question-t2-1) answered: staging by cli`.
 */
export function describeWaitEntry(entry: WaitEntry): string {
  const what = `${entry.kind.replace('-', ' ')} (${entry.waitId})`;
  if (entry.action === 'opened') {
    const asked =
      entry.wait?.kind === 'question'
        ? `: ${short(entry.wait.question, 200)}`
        : entry.wait?.kind === 'step-approval'
          ? `: ${entry.wait.taskId} would run ${short(stepText(entry.wait), 200)}`
          : '';
    return `waiting for a person: ${what}${asked}`;
  }
  const answer = entry.answer;
  const said =
    answer?.action === 'answer'
      ? `answered: ${short(answer.text)}`
      : answer?.action === 'reject'
        ? `rejected: ${short(answer.feedback)}`
        : answer?.action === 'edit'
          ? `edited (${answer.plan.tasks.length} task(s))`
          : answer?.action === 'approve'
            ? 'approved'
            : 'ended';
  if (entry.action === 'timed-out') return `${what} timed out: ${said}`;
  return `${what} ${said}${entry.by ? ` by ${entry.by}` : ''}`;
}
