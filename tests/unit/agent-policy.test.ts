import { describe, expect, it } from 'vitest';
import {
  PlanningConfig,
  type PlanningConfig as PlanningConfigType,
} from '../../src/shared/config/schema.js';
import {
  afterAction,
  afterReflection,
  afterRevision,
  canRevise,
  INITIAL_COUNTERS,
  isBudgetSpent,
  reflectionTrigger,
  shouldReflect,
  type AgentCounters,
} from '../../src/workers/executors/agent/policy.js';

const planning = (input: Parameters<typeof PlanningConfig.parse>[0] = {}): PlanningConfigType =>
  PlanningConfig.parse(input);

const counters = (over: Partial<AgentCounters> = {}): AgentCounters => ({
  ...INITIAL_COUNTERS,
  ...over,
});

describe('shouldReflect (seed 004: on every error and every trigger_interval actions)', () => {
  const defaults = planning(); // trigger_on_error: true, trigger_interval: 3

  it.each([
    // [actionsSinceReflection, lastActionFailed, expected trigger]
    [0, false, undefined],
    [0, true, undefined],
    [1, false, undefined],
    [1, true, 'error'],
    [2, false, undefined],
    [2, true, 'error'],
    [3, false, 'interval'],
    [3, true, 'error'],
    [4, false, 'interval'],
  ] as const)(
    'with %i action(s) since the last reflection and a failed last action = %s: %s',
    (since, failed, expected) => {
      const c = counters({ actions: since + 5, actionsSinceReflection: since });
      expect(reflectionTrigger(c, failed, defaults)).toBe(expected);
      expect(shouldReflect(c, failed, defaults)).toBe(expected !== undefined);
    },
  );

  it('does not reflect on an error when trigger_on_error is off, only at the interval', () => {
    const config = planning({ reflection: { trigger_on_error: false, trigger_interval: 2 } });
    expect(shouldReflect(counters({ actionsSinceReflection: 1 }), true, config)).toBe(false);
    expect(reflectionTrigger(counters({ actionsSinceReflection: 2 }), true, config)).toBe(
      'interval',
    );
  });

  it('reflects after every action with trigger_interval 1', () => {
    const config = planning({ reflection: { trigger_interval: 1 } });
    expect(reflectionTrigger(counters({ actionsSinceReflection: 1 }), false, config)).toBe(
      'interval',
    );
  });

  it('never reflects when reflection is disabled', () => {
    const config = planning({ reflection: { enabled: false } });
    for (const failed of [true, false]) {
      expect(shouldReflect(counters({ actionsSinceReflection: 10 }), failed, config)).toBe(false);
    }
  });

  it('never reflects when planning is disabled (legacy mode)', () => {
    const config = planning({ enabled: false });
    for (const failed of [true, false]) {
      expect(shouldReflect(counters({ actionsSinceReflection: 10 }), failed, config)).toBe(false);
    }
  });

  it('does not reflect twice on the same action: a reflection resets the interval', () => {
    const after = afterReflection(counters({ actions: 3, actionsSinceReflection: 3 }));
    expect(shouldReflect(after, true, defaults)).toBe(false);
  });
});

describe('canRevise (at most planning.revision.max_revisions)', () => {
  it.each([
    [0, 0, false],
    [0, 1, true],
    [1, 1, false],
    [2, 3, true],
    [3, 3, false],
    [4, 3, false],
  ] as const)('with %i revision(s) made and max_revisions %i: %s', (made, max, expected) => {
    expect(
      canRevise(counters({ revisions: made }), planning({ revision: { max_revisions: max } })),
    ).toBe(expected);
  });

  it('allows no revision when planning is disabled', () => {
    expect(canRevise(counters(), planning({ enabled: false }))).toBe(false);
  });
});

describe('isBudgetSpent (execution.maxAgentActions)', () => {
  it.each([
    [0, 1, false],
    [1, 1, true],
    [29, 30, false],
    [30, 30, true],
    [31, 30, true],
  ] as const)('%i action(s) of a budget of %i: %s', (actions, max, expected) => {
    expect(isBudgetSpent(counters({ actions }), max)).toBe(expected);
  });
});

describe('counter transitions', () => {
  it('an action counts towards the budget and the interval', () => {
    expect(afterAction(counters({ actions: 2, actionsSinceReflection: 1 }))).toEqual(
      counters({ actions: 3, actionsSinceReflection: 2 }),
    );
  });

  it('a reflection resets the interval but not the budget', () => {
    expect(
      afterReflection(counters({ actions: 3, actionsSinceReflection: 3, reflections: 1 })),
    ).toEqual(counters({ actions: 3, actionsSinceReflection: 0, reflections: 2 }));
  });

  it('a revision counts towards max_revisions', () => {
    expect(afterRevision(counters({ revisions: 1 }))).toEqual(counters({ revisions: 2 }));
  });

  it('a run of N failing actions with the defaults reflects N times and revises at most 3 times', () => {
    const config = planning();
    let c = counters();
    let reflections = 0;
    let revisions = 0;
    while (!isBudgetSpent(c, 30)) {
      c = afterAction(c);
      if (shouldReflect(c, true, config)) {
        c = afterReflection(c);
        reflections += 1;
        if (canRevise(c, config)) {
          c = afterRevision(c);
          revisions += 1;
        }
      }
    }
    expect(reflections).toBe(30);
    expect(revisions).toBe(3);
  });
});
