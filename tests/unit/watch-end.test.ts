import { describe, expect, it } from 'vitest';
import type { SessionState } from '../../src/shared/domain/session.js';
import { watchEnds, type WatchUntil } from '../../src/shared/rules/watch-end.js';

// [state, until, ends with no resume pending, ends with a resume pending]
const TABLE: [SessionState, WatchUntil, boolean, boolean][] = [
  ['PLANNING', 'finished', false, false],
  ['PLANNING', 'settled', false, false],
  ['RUNNING', 'finished', false, false],
  ['RUNNING', 'settled', false, false],
  ['BLOCKED', 'finished', false, false],
  ['BLOCKED', 'settled', true, false],
  // A plan waiting for a person (issue 48): settled, until an answer is queued.
  ['AWAITING_APPROVAL', 'finished', false, false],
  ['AWAITING_APPROVAL', 'settled', true, false],
  ['BUDGET_EXHAUSTED', 'finished', true, false],
  ['BUDGET_EXHAUSTED', 'settled', true, false],
  // A resume meets these finished states ignored: nothing will move them.
  ['COMPLETED', 'finished', true, true],
  ['COMPLETED', 'settled', true, true],
  ['FAILED', 'finished', true, true],
  ['FAILED', 'settled', true, true],
  ['CANCELLED', 'finished', true, true],
  ['CANCELLED', 'settled', true, true],
];

describe('watchEnds', () => {
  it.each(TABLE)(
    '%s until %s: ends %s, with a resume pending %s',
    (state, until, idle, resuming) => {
      expect(watchEnds(state, until, false)).toBe(idle);
      expect(watchEnds(state, until, true)).toBe(resuming);
    },
  );

  it('ends the watch of a session that is gone', () => {
    expect(watchEnds(undefined, 'finished', false)).toBe(true);
    expect(watchEnds(undefined, 'settled', true)).toBe(true);
  });
});
