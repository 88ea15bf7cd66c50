import type { FakeLlmRequest, FakeReply } from './fake-llm-server.js';

/** A plan of one task, `t1`. */
export const ONE_TASK_PLAN = {
  tasks: [{ id: 't1', title: 'the parser', acceptance: 'parses the input', dependencies: [] }],
};

/**
 * A valid answer for every role's schema, for a fake provider server: one task, accepted at
 * once, executed and judged done. Anything else is answered 400.
 */
export function answerOneTask(request: FakeLlmRequest): FakeReply {
  switch (request.schemaName) {
    case 'PlanBreakdown':
      return { json: ONE_TASK_PLAN };
    case 'QualityJudgement':
      return { json: { score: 90, isAcceptable: true, issues: [], suggestions: [] } };
    case 'TaskOutput':
      return { json: { output: 'the parser', log: '' } };
    case 'TaskJudgement':
      return {
        json: { success: true, shouldContinue: false, shouldReplan: false, reason: 'parses it' },
      };
    default:
      return { status: 400 };
  }
}
