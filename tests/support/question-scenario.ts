import type { ScenarioInput } from '../../src/shared/config/scenario.js';

/** What the Judge asks a person in the question tests (issue 48). */
export const QUESTION = 'Which registry should the image go to, staging or production?';

/**
 * t2 is blocked by a judge that asks a person something (QUESTION); its next execution, with
 * the answer, is accepted.
 */
export const ASKS: ScenarioInput = {
  plans: [
    {
      tasks: [
        { id: 't1', title: 'Build the image', acceptance: 'it builds', context: 'c' },
        {
          id: 't2',
          title: 'Push the image',
          acceptance: 'it is in the registry',
          context: 'c',
          dependencies: ['t1'],
        },
      ],
    },
  ],
  planJudgements: [{ score: 90, isAcceptable: true }],
  tasks: {
    t2: {
      results: [{ output: 'which registry?' }, { output: 'pushed to staging' }],
      judgements: [
        {
          success: false,
          shouldContinue: false,
          shouldReplan: false,
          reason: 'the target registry is not given',
          question: QUESTION,
        },
        { success: true, reason: 'pushed' },
      ],
    },
  },
};
