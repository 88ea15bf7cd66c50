import { describe, expect, it } from 'vitest';
import { RefinementConfig, type RefinementConfigInput } from '../../src/shared/config/schema.js';
import type { RefinementReasonCode } from '../../src/shared/domain/refinement.js';
import {
  advanceRefinementCounters,
  makeRefinementDecision,
  type RefinementDecisionParams,
} from '../../src/shared/rules/refinement.js';

/**
 * refinement.targetScore (issue 50): the seeds' origin (berlysia/agent-orchestrator) accepts a
 * plan at once at its targetScore and replans one below it for the judge's suggestions. orq
 * puts the rule between seed 000's priorities 4 and 5 (DESIGN.md): it decides only plans the
 * judge found acceptable, after attempts, a missing score and stagnation have had their say.
 */

type Row = [
  name: string,
  params: Omit<RefinementDecisionParams, 'config' | 'issues'> & { issues?: string[] },
  config: RefinementConfigInput,
  decision: 'accept' | 'replan' | 'reject',
  reasonCode: RefinementReasonCode,
];

function decide([, params, config]: Row) {
  return makeRefinementDecision({
    issues: [],
    ...params,
    config: RefinementConfig.parse(config),
  });
}

/**
 * The origin's own target-score cases (tests/unit/core/orchestrator/planner-operations.test.ts,
 * "Refinement Decision"), as data: its config (targetScore 85) and inputs, with the origin's
 * expected decision. Every row agrees with the origin's answer.
 */
const ORIGIN = { targetScore: 85 };
const originRows: Row[] = [
  [
    'quality OK, no suggestions, below the target (origin: 品質OK)',
    { isAcceptable: true, score: 78, suggestions: [], attemptCount: 0, suggestionReplanCount: 0 },
    ORIGIN,
    'accept',
    'quality_ok',
  ],
  [
    'at the target with suggestions and refineSuggestionsOnSuccess (origin: targetScore到達)',
    {
      isAcceptable: true,
      score: 90,
      suggestions: ['Add edge case handling'],
      attemptCount: 0,
      suggestionReplanCount: 0,
    },
    { ...ORIGIN, refineSuggestionsOnSuccess: true, maxSuggestionReplans: 2 },
    'accept',
    'target_score_reached',
  ],
  [
    'below the target with suggestions (origin: targetScore未達)',
    {
      isAcceptable: true,
      score: 78,
      suggestions: ['Add edge case handling'],
      attemptCount: 0,
      suggestionReplanCount: 0,
    },
    { ...ORIGIN, refineSuggestionsOnSuccess: true, maxSuggestionReplans: 2 },
    'replan',
    'target_score_not_reached',
  ],
  [
    'at the target with the suggestion budget spent (origin: targetScore到達)',
    {
      isAcceptable: true,
      score: 90,
      previousScore: 78,
      suggestions: ['More suggestions'],
      attemptCount: 1,
      suggestionReplanCount: 1,
    },
    { ...ORIGIN, refineSuggestionsOnSuccess: true, maxSuggestionReplans: 1 },
    'accept',
    'target_score_reached',
  ],
  [
    'below a target of 95 with no suggestions (origin: 品質OK)',
    {
      isAcceptable: true,
      score: 90,
      previousScore: 78,
      suggestions: [],
      attemptCount: 1,
      suggestionReplanCount: 1,
    },
    { targetScore: 95, refineSuggestionsOnSuccess: true, maxSuggestionReplans: 1 },
    'accept',
    'quality_ok',
  ],
  [
    'improved enough, below the target, no suggestions (origin: 品質OK)',
    {
      isAcceptable: true,
      score: 75,
      previousScore: 70,
      suggestions: [],
      attemptCount: 1,
      suggestionReplanCount: 0,
    },
    ORIGIN,
    'accept',
    'quality_ok',
  ],
  [
    'at the target after a large improvement (origin: targetScore到達)',
    {
      isAcceptable: true,
      score: 95,
      previousScore: 90,
      suggestions: [],
      attemptCount: 1,
      suggestionReplanCount: 0,
    },
    ORIGIN,
    'accept',
    'target_score_reached',
  ],
];

/** Where orq's place for the rule (between 4 and 5) decides, and the limits it keeps. */
const orqRows: Row[] = [
  [
    'unset (the default): the seeds alone; suggestions are not replanned for',
    {
      isAcceptable: true,
      score: 70,
      suggestions: ['s'],
      attemptCount: 0,
      suggestionReplanCount: 0,
    },
    {},
    'accept',
    'quality_ok',
  ],
  [
    'below the target, refineSuggestionsOnSuccess off: still replanned for the suggestions',
    {
      isAcceptable: true,
      score: 70,
      suggestions: ['s'],
      attemptCount: 0,
      suggestionReplanCount: 0,
    },
    ORIGIN,
    'replan',
    'target_score_not_reached',
  ],
  [
    'below the target, maxSuggestionReplans spent: accepted, with the reason',
    {
      isAcceptable: true,
      score: 70,
      suggestions: ['s'],
      attemptCount: 0,
      suggestionReplanCount: 1,
    },
    ORIGIN,
    'accept',
    'quality_ok',
  ],
  [
    'at the target but unacceptable: priority 4 replans (the origin would accept)',
    {
      isAcceptable: false,
      score: 90,
      issues: ['a required step is missing'],
      suggestions: [],
      attemptCount: 0,
      suggestionReplanCount: 0,
    },
    ORIGIN,
    'replan',
    'quality_below_threshold',
  ],
  [
    'at the target but attempts exhausted: priority 1 decides',
    {
      isAcceptable: true,
      score: 90,
      suggestions: ['s'],
      attemptCount: 2,
      suggestionReplanCount: 0,
    },
    ORIGIN,
    'accept',
    'max_attempts_reached',
  ],
  [
    'below the target and stagnated: priority 3 accepts, as the origin does',
    {
      isAcceptable: true,
      score: 74,
      previousScore: 70,
      suggestions: ['s'],
      attemptCount: 1,
      suggestionReplanCount: 0,
    },
    ORIGIN,
    'accept',
    'stagnation',
  ],
  [
    'exactly at the target counts as reached',
    {
      isAcceptable: true,
      score: 85,
      suggestions: ['s'],
      attemptCount: 0,
      suggestionReplanCount: 0,
    },
    ORIGIN,
    'accept',
    'target_score_reached',
  ],
];

describe('refinement.targetScore', () => {
  describe("the origin's own cases", () => {
    it.each(originRows)('%s', (...row) => {
      const result = decide(row);
      expect([result.decision, result.reasonCode]).toEqual([row[3], row[4]]);
    });
  });

  describe("orq's place for it, between priorities 4 and 5", () => {
    it.each(orqRows)('%s', (...row) => {
      const result = decide(row);
      expect([result.decision, result.reasonCode]).toEqual([row[3], row[4]]);
    });
  });

  it('says in its reason which case applied, with the score and the target', () => {
    const reached = decide(originRows[1]!);
    expect(reached.reason).toBe(
      'plan is acceptable at score 90, at or above targetScore 85; accepting without replanning for 1 suggestion',
    );
    const below = decide(originRows[2]!);
    expect(below.reason).toContain('below targetScore 85; replanning to apply 1 suggestion');
    expect(below.feedback).toEqual({ issues: [], suggestions: ['Add edge case handling'] });
    expect(decide(orqRows[2]!).reason).toContain(
      'below targetScore 85, and all 1 of maxSuggestionReplans are used',
    );
  });

  it('spends the suggestion budget, not the attempts, so the loop stays bounded', () => {
    const result = decide(orqRows[1]!);
    expect(advanceRefinementCounters(result)).toEqual({
      attemptCount: 0,
      suggestionReplanCount: 1,
    });
  });
});
