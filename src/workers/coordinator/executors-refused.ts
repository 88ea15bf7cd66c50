import type { HistoryEntryDraft } from '../../shared/domain/history.js';
import {
  refusedExecutorsReason,
  type ExecutorPolicy,
  type RefusedExecutor,
} from '../../shared/rules/executor-choice.js';

/** The history entry of executor choices a plan or replan made that the session refuses. */
export function executorsRefused(
  refused: readonly RefusedExecutor[],
  policy: ExecutorPolicy,
  runsOn?: string,
): Extract<HistoryEntryDraft, { type: 'decision' }> {
  return {
    type: 'decision',
    decision: 'executor:refused',
    reason: refusedExecutorsReason(refused, policy, runsOn),
    inputs: {
      refused: [...refused],
      taskExecutors: [...policy.taskExecutors],
      defaultExecutor: policy.defaultExecutor,
    },
  };
}
