import type { PlanJudgeRequest } from '../../src/workers/llm/types.js';

/** A plan judge's request for a first plan of one task, as the judge tests ask it. */
export const PLAN_JUDGE_REQUEST: PlanJudgeRequest = {
  sessionId: 's1',
  instruction: 'Write the parser',
  attempt: 0,
  plan: {
    summary: '',
    tasks: [
      {
        id: 't1',
        title: 'Write the parser',
        acceptance: 'parses',
        context: 'c',
        scopePaths: [],
        dependencies: [],
      },
    ],
  },
  requiredTerms: [],
};
