import { expect } from 'vitest';
import type { SubmitRequest } from '../../src/producers/client.js';
import type { RoleModels } from '../../src/workers/llm/types.js';
import type { startCluster, TestCluster } from './cluster.js';
import { deferred, eventually, recordingModels, type RecordedCalls } from './scenarios.js';

export const BUDGET_QUESTION = 'Which registry should the image go to?';

/**
 * A session its budget stops while a question is open (issue 48): Q asks a person; W, beside
 * it, spends past the budget once `spend` is called (its execution is held until then), so the
 * reservation of W's verdict is refused and the session stops in BUDGET_EXHAUSTED. Q's second
 * execution is accepted.
 */
export function budgetQuestionModels(): {
  models: RoleModels;
  calls: RecordedCalls;
  spend: () => void;
  submit: SubmitRequest;
} {
  const spending = deferred();
  const { models, calls } = recordingModels(
    {
      plans: [
        {
          tasks: [
            { id: 'Q', title: 'Push the image', acceptance: 'pushed', context: 'c' },
            { id: 'W', title: 'Write the notes', acceptance: 'written', context: 'c' },
          ],
        },
      ],
      planJudgements: [{ score: 90, isAcceptable: true }],
      tasks: {
        Q: {
          results: [{ output: 'which registry?' }, { output: 'pushed' }],
          judgements: [
            { success: false, reason: 'no registry given', question: BUDGET_QUESTION },
            { success: true, reason: 'pushed' },
          ],
        },
        W: {
          results: [{ output: 'notes', tokenUsage: { inputTokens: 50_000, outputTokens: 0 } }],
        },
      },
    },
    { beforeExecute: (request) => (request.task.id === 'W' ? spending.promise : undefined) },
  );
  return {
    models,
    calls,
    spend: () => spending.resolve(),
    submit: {
      instruction: 'Push the image and write the notes',
      config: { budget: { maxTokens: 20_000, reserveTokensPerCall: 100 } },
    },
  };
}

/** Resolves once the session asks its question. */
export const questionAsked = (c: TestCluster, id: string) =>
  eventually(
    async () => ((await c.client.get(id)).session.questions?.length ? true : undefined),
    'the question',
  );

/** The session of budgetQuestionModels on a cluster of its own, stopped with Q's question open. */
export async function budgetStoppedQuestion(start: typeof startCluster): Promise<{
  c: TestCluster;
  id: string;
  calls: RecordedCalls;
}> {
  const { models, calls, spend, submit } = budgetQuestionModels();
  const c = await start({ models });
  const { id } = await c.client.submit(submit);
  await questionAsked(c, id);
  spend();
  const stopped = await c.client.wait(id, { timeoutMs: 20_000 });
  expect(stopped.session.state).toBe('BUDGET_EXHAUSTED');
  return { c, id, calls };
}
