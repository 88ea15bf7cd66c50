import { describe, expect, it } from 'vitest';
import { FINISHED_SESSION_STATES, SessionState } from '../../src/shared/domain/session.js';
import { pruneVerdict, unfinishedStates } from '../../src/shared/rules/retention.js';
import { parseDurationSeconds } from '../../src/producers/cli/options.js';

const CUTOFF = 1_000_000;
const ALL_STATES = SessionState.options;

describe('pruneVerdict', () => {
  it.each(ALL_STATES)('decides %s by its state and idle time', (state) => {
    const finished = FINISHED_SESSION_STATES.includes(state);
    const idle = pruneVerdict({ state, lastActivityMs: CUTOFF - 1 }, { cutoffMs: CUTOFF });
    expect(idle).toBe(finished ? 'delete' : 'keep');
    // Active at the cutoff or after it: kept, whatever the state.
    expect(pruneVerdict({ state, lastActivityMs: CUTOFF }, { cutoffMs: CUTOFF })).toBe('keep');
    expect(pruneVerdict({ state, lastActivityMs: CUTOFF + 1 }, { cutoffMs: CUTOFF })).toBe('keep');
    // Without a history entry to date it, nothing is known: kept.
    expect(pruneVerdict({ state }, { cutoffMs: CUTOFF })).toBe('keep');
  });

  it.each(FINISHED_SESSION_STATES)('deletes %s only when the rule names its state', (state) => {
    const others = FINISHED_SESSION_STATES.filter((s) => s !== state);
    const old = { state, lastActivityMs: 0 };
    expect(pruneVerdict(old, { cutoffMs: CUTOFF, states: [state] })).toBe('delete');
    expect(pruneVerdict(old, { cutoffMs: CUTOFF, states: others })).toBe('keep');
  });

  it('keeps an unfinished session even when a rule names its state', () => {
    const rule = { cutoffMs: CUTOFF, states: ['RUNNING', 'BLOCKED'] as SessionState[] };
    expect(pruneVerdict({ state: 'RUNNING', lastActivityMs: 0 }, rule)).toBe('keep');
    expect(pruneVerdict({ state: 'BLOCKED', lastActivityMs: 0 }, rule)).toBe('keep');
  });

  it.each(ALL_STATES)(
    'counts a resume of %s enqueued since the cutoff and not applied yet as activity',
    (state) => {
      const finished = FINISHED_SESSION_STATES.includes(state);
      const rule = { cutoffMs: CUTOFF };
      const idle = { state, lastActivityMs: CUTOFF - 10 };
      // A resume writes no history until it is applied: its enqueueing is the activity.
      expect(pruneVerdict({ ...idle, pendingResumeMs: CUTOFF }, rule)).toBe('keep');
      expect(pruneVerdict({ ...idle, pendingResumeMs: CUTOFF + 1 }, rule)).toBe('keep');
      // One enqueued before the cutoff (its job long gone, say) keeps nothing.
      const stale = finished ? 'delete' : 'keep';
      expect(pruneVerdict({ ...idle, pendingResumeMs: CUTOFF - 1 }, rule)).toBe(stale);
      expect(pruneVerdict({ ...idle, pendingResumeMs: 0 }, rule)).toBe(stale);
      // Older than the last history entry: the history decides.
      expect(pruneVerdict({ state, lastActivityMs: CUTOFF, pendingResumeMs: 0 }, rule)).toBe(
        'keep',
      );
      // Without a history entry to date the session, nothing is known: kept as before.
      expect(pruneVerdict({ state, pendingResumeMs: 0 }, rule)).toBe('keep');
      expect(pruneVerdict({ state, pendingResumeMs: CUTOFF }, rule)).toBe('keep');
    },
  );

  it('lets a rule that names the state decide before any resume is looked at', () => {
    const exhausted = { state: 'BUDGET_EXHAUSTED' as const, lastActivityMs: 0 };
    const others = { cutoffMs: CUTOFF, states: ['COMPLETED'] as SessionState[] };
    expect(pruneVerdict({ ...exhausted, pendingResumeMs: CUTOFF }, others)).toBe('keep');
    expect(pruneVerdict({ ...exhausted, pendingResumeMs: 0 }, others)).toBe('keep');
    const named = { cutoffMs: CUTOFF, states: ['BUDGET_EXHAUSTED'] as SessionState[] };
    expect(pruneVerdict({ ...exhausted, pendingResumeMs: CUTOFF }, named)).toBe('keep');
    expect(pruneVerdict({ ...exhausted, pendingResumeMs: CUTOFF - 1 }, named)).toBe('delete');
  });

  it('drops the index entry of a session whose record is gone', () => {
    expect(pruneVerdict({}, { cutoffMs: CUTOFF })).toBe('unindex');
    expect(pruneVerdict({ lastActivityMs: 0 }, { cutoffMs: CUTOFF })).toBe('unindex');
    expect(pruneVerdict({ pendingResumeMs: CUTOFF }, { cutoffMs: CUTOFF })).toBe('unindex');
  });
});

describe('unfinishedStates', () => {
  it('names the states a prune may not touch', () => {
    expect(unfinishedStates(ALL_STATES)).toEqual([
      'PLANNING',
      'RUNNING',
      'INTEGRATING',
      'AWAITING_APPROVAL',
      'BLOCKED',
    ]);
    expect(unfinishedStates(FINISHED_SESSION_STATES)).toEqual([]);
  });
});

describe('parseDurationSeconds (orq prune --older-than)', () => {
  it.each([
    ['90s', 90],
    ['30m', 1800],
    ['12h', 43_200],
    ['7d', 604_800],
    ['2w', 1_209_600],
    ['1.5h', 5400],
    ['0s', 0],
  ])('reads %s as %i seconds', (text, seconds) => {
    expect(parseDurationSeconds(text)).toBe(seconds);
  });

  it.each(['7', '1.5', 'soon', '', '-5d', '7 parsecs'])(
    'refuses %j with the units to use',
    (text) => {
      expect(() => parseDurationSeconds(text)).toThrow(/a unit such as 90s, 30m, 12h, 7d or 2w/);
    },
  );
});
