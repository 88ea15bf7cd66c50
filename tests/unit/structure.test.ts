import { describe, it, expect } from 'vitest';
import { RefinementConfig } from '../../src/shared/config/schema.js';
import type { RefinementConfigInput } from '../../src/shared/config/schema.js';
import { PlannedTask } from '../../src/shared/domain/plan.js';
import { Task } from '../../src/shared/domain/task.js';
import type { RequiredTerms } from '../../src/shared/domain/refinement.js';
import {
  findCycles,
  findDanglingDependencies,
  taskCapProblem,
  taskCountChangeRate,
  validateReplacementTerms,
  validateStructure,
} from '../../src/shared/rules/structure.js';
import type { StructureTask } from '../../src/shared/rules/structure.js';

const config = (overrides: RefinementConfigInput = {}): RefinementConfig =>
  RefinementConfig.parse(overrides);

const task = (id: string, dependencies: string[] = [], acceptance = `finish ${id}`) => ({
  id,
  dependencies,
  acceptance,
});

/** n independent tasks t1..tn. */
const tasks = (n: number): StructureTask[] =>
  Array.from({ length: n }, (_, i) => task(`t${i + 1}`));

const required = (...terms: string[]): RequiredTerms => ({ terms, source: 'user-input' });

describe('validateStructure: task count change (seed 000)', () => {
  it('accepts an unchanged task count with change 0', () => {
    const result = validateStructure(tasks(5), tasks(5), config());
    expect(result.isValid).toBe(true);
    expect(result.taskCountChange).toBe(0);
    expect(result.problems).toEqual([]);
  });

  it('reports the change as |new - old| / old', () => {
    expect(validateStructure(tasks(10), tasks(14), config()).taskCountChange).toBeCloseTo(0.4);
  });

  it('accepts a change exactly at the 30% threshold (10 → 13)', () => {
    const result = validateStructure(tasks(10), tasks(13), config());
    expect(result.taskCountChange).toBe(0.3);
    expect(result.isValid).toBe(true);
  });

  it('breaks on a change just over both limits (10 → 14)', () => {
    const result = validateStructure(tasks(10), tasks(14), config());
    expect(result.isValid).toBe(false);
    expect(result.problems).toHaveLength(1);
    expect(result.problems[0]).toContain('from 10 to 14');
  });

  it('accepts a large rate when the absolute difference is exactly the minimum (5 → 7)', () => {
    const result = validateStructure(tasks(5), tasks(7), config());
    expect(result.taskCountChange).toBeCloseTo(0.4);
    expect(result.isValid).toBe(true);
  });

  it('breaks once the absolute difference is just over the minimum (5 → 8)', () => {
    expect(validateStructure(tasks(5), tasks(8), config()).isValid).toBe(false);
  });

  it('accepts a change where only the rate is exceeded (2 → 4)', () => {
    const result = validateStructure(tasks(2), tasks(4), config());
    expect(result.taskCountChange).toBe(1);
    expect(result.isValid).toBe(true);
  });

  it('accepts a change where only the absolute difference is exceeded (100 → 120)', () => {
    const result = validateStructure(tasks(100), tasks(120), config());
    expect(result.taskCountChange).toBeCloseTo(0.2);
    expect(result.isValid).toBe(true);
  });

  it('breaks on a large shrink as on a large growth (10 → 6)', () => {
    expect(validateStructure(tasks(10), tasks(6), config()).isValid).toBe(false);
  });

  it('uses the configured threshold, exactly at it being fine (4 → 6 at 50%)', () => {
    const loose = config({ taskCountChangeThreshold: 0.5, taskCountChangeMinAbsolute: 0 });
    expect(validateStructure(tasks(4), tasks(6), loose).isValid).toBe(true);
    expect(validateStructure(tasks(4), tasks(7), loose).isValid).toBe(false);
  });

  it('uses the configured minimum absolute difference', () => {
    const strict = config({ taskCountChangeMinAbsolute: 0 });
    expect(validateStructure(tasks(2), tasks(3), strict).isValid).toBe(false);
  });
});

describe('taskCountChangeRate with no previous tasks', () => {
  it('is 0 when both plans are empty', () => {
    expect(taskCountChangeRate(0, 0)).toBe(0);
  });

  it('is 1 when tasks appear from nothing', () => {
    expect(taskCountChangeRate(0, 7)).toBe(1);
  });

  it('leaves 0 → 2 tasks valid: the absolute difference does not exceed 2', () => {
    const result = validateStructure([], tasks(2), config());
    expect(result.taskCountChange).toBe(1);
    expect(result.isValid).toBe(true);
  });

  it('breaks 0 → 3 tasks', () => {
    expect(validateStructure([], tasks(3), config()).isValid).toBe(false);
  });

  it('accepts two empty plans', () => {
    const result = validateStructure([], [], config());
    expect(result.isValid).toBe(true);
    expect(result.taskCountChange).toBe(0);
  });
});

describe('validateStructure: dangling dependencies (seed 000)', () => {
  it('breaks when a task depends on an id not in the plan, naming both', () => {
    const result = validateStructure(tasks(2), [task('a'), task('b', ['ghost'])], config());
    expect(result.isValid).toBe(false);
    expect(result.hasDanglingDependency).toBe(true);
    expect(result.danglingDependencies).toEqual([{ taskId: 'b', dependsOn: 'ghost' }]);
    expect(result.problems).toEqual(['Task "b" depends on "ghost", which is not in the plan.']);
  });

  it('catches a dependency on a task the replan removed', () => {
    const before = [task('a'), task('b', ['a'])];
    const after = [task('b', ['a'])];
    expect(validateStructure(before, after, config()).danglingDependencies).toEqual([
      { taskId: 'b', dependsOn: 'a' },
    ]);
  });

  it('accepts dependencies that all exist', () => {
    const plan = [task('a'), task('b', ['a']), task('c', ['a', 'b'])];
    const result = validateStructure(plan, plan, config());
    expect(result.hasDanglingDependency).toBe(false);
    expect(result.danglingDependencies).toEqual([]);
  });
});

describe('findDanglingDependencies', () => {
  it('reports every dangling dependency, in task order', () => {
    expect(
      findDanglingDependencies([task('a', ['x', 'y']), task('b', ['a']), task('c', ['z'])]),
    ).toEqual([
      { taskId: 'a', dependsOn: 'x' },
      { taskId: 'a', dependsOn: 'y' },
      { taskId: 'c', dependsOn: 'z' },
    ]);
  });

  it('reports a dependency repeated inside one task once', () => {
    expect(findDanglingDependencies([task('a', ['x', 'x'])])).toEqual([
      { taskId: 'a', dependsOn: 'x' },
    ]);
  });

  it('treats a missing dependencies field as none', () => {
    expect(findDanglingDependencies([{ id: 'a' }])).toEqual([]);
  });

  it('does not count a self-dependency as dangling', () => {
    expect(findDanglingDependencies([task('a', ['a'])])).toEqual([]);
  });
});

describe('findCycles', () => {
  it('finds nothing in a diamond', () => {
    expect(
      findCycles([task('a'), task('b', ['a']), task('c', ['a']), task('d', ['b', 'c'])]),
    ).toEqual([]);
  });

  it('reports a self-dependency as a one-task cycle', () => {
    expect(findCycles([task('a', ['a'])])).toEqual([['a']]);
  });

  it('reports a two-task cycle', () => {
    expect(findCycles([task('a', ['b']), task('b', ['a'])])).toEqual([['a', 'b']]);
  });

  it('lists a cycle from its first task, each depending on the next', () => {
    // a depends on c, c on b, b on a.
    expect(findCycles([task('a', ['c']), task('b', ['a']), task('c', ['b'])])).toEqual([
      ['a', 'c', 'b'],
    ]);
  });

  it('reports one cycle for each separate cyclic part', () => {
    expect(
      findCycles([
        task('a', ['b']),
        task('b', ['a']),
        task('free'),
        task('c', ['d']),
        task('d', ['c']),
      ]),
    ).toEqual([
      ['a', 'b'],
      ['c', 'd'],
    ]);
  });

  it('reports a self-dependency inside a larger cycle as well as that cycle', () => {
    expect(findCycles([task('a', ['a', 'b']), task('b', ['a'])])).toEqual([['a'], ['a', 'b']]);
  });

  it('picks a shortest cycle through the first task of a cyclic part', () => {
    // a → b → c → d → a, and the shortcut a → d.
    const cycles = findCycles([
      task('a', ['b', 'd']),
      task('b', ['c']),
      task('c', ['d']),
      task('d', ['a']),
    ]);
    expect(cycles).toEqual([['a', 'd']]);
  });

  it('ignores dependencies on unknown ids', () => {
    expect(findCycles([task('a', ['ghost']), task('b', ['a'])])).toEqual([]);
  });

  it('merges the dependencies of tasks sharing an id', () => {
    expect(findCycles([task('a', []), task('b', ['a']), task('a', ['b'])])).toEqual([['a', 'b']]);
  });

  it('handles a 10,000-task chain without overflowing the stack', () => {
    const chain = Array.from({ length: 10_000 }, (_, i) =>
      task(`t${i}`, i > 0 ? [`t${i - 1}`] : []),
    );
    expect(findCycles(chain)).toEqual([]);
  });

  it('finds the whole of a 10,000-task ring', () => {
    const n = 10_000;
    const ring = Array.from({ length: n }, (_, i) => task(`t${i}`, [`t${(i + n - 1) % n}`]));
    const cycles = findCycles(ring);
    expect(cycles).toHaveLength(1);
    expect(cycles[0]).toHaveLength(n);
    expect(cycles[0]!.slice(0, 3)).toEqual(['t0', `t${n - 1}`, `t${n - 2}`]);
  });
});

describe('validateStructure: cycles and duplicate ids (seed 000)', () => {
  it('breaks on a self-dependency', () => {
    const result = validateStructure(tasks(1), [task('a', ['a'])], config());
    expect(result.isValid).toBe(false);
    expect(result.hasCircularDependency).toBe(true);
    expect(result.cycles).toEqual([['a']]);
    expect(result.problems).toEqual(['Task "a" depends on itself.']);
  });

  it('breaks on a cycle, naming its tasks in order', () => {
    const plan = [task('a', ['b']), task('b', ['c']), task('c', ['a'])];
    const result = validateStructure(plan, plan, config());
    expect(result.isValid).toBe(false);
    expect(result.cycles).toEqual([['a', 'b', 'c']]);
    expect(result.problems).toEqual([
      'Dependency cycle: "a" → "b" → "c" → "a" (each task depends on the next).',
    ]);
  });

  it('breaks on two tasks sharing an id, naming the id and the count', () => {
    const result = validateStructure(tasks(3), [task('a'), task('b'), task('a')], config());
    expect(result.isValid).toBe(false);
    expect(result.problems).toEqual(['Task id "a" is used by 2 tasks; task ids must be unique.']);
  });

  it('handles a 10,000-task chain as a valid plan', () => {
    const chain = Array.from({ length: 10_000 }, (_, i) =>
      task(`t${i}`, i > 0 ? [`t${i - 1}`] : []),
    );
    const result = validateStructure(chain, chain, config());
    expect(result.isValid).toBe(true);
  });

  it('lists every problem when several rules are broken', () => {
    const result = validateStructure(
      tasks(1),
      [task('a', ['a']), task('b', ['ghost']), task('b'), task('c'), task('d')],
      config(),
    );
    expect(result.isValid).toBe(false);
    expect(result.problems).toHaveLength(4);
  });

  it('accepts PlannedTask and Task values as they are', () => {
    const planned = [
      PlannedTask.parse({ id: 'a', title: 'A', acceptance: 'JWT認証' }),
      PlannedTask.parse({ id: 'b', title: 'B', acceptance: '入力検証', dependencies: ['a'] }),
    ];
    const tracked = [Task.parse({ id: 'a', title: 'A', acceptance: 'JWT認証' })];
    const result = validateStructure(tracked, planned, config(), required('認証'));
    expect(result.isValid).toBe(true);
    expect(result.termPreservation?.preservationRate).toBe(1);
  });
});

describe('validateStructure: required-term preservation (seed 002)', () => {
  const original = [
    task('t1', [], 'JWT認証の実装'),
    task('t2', [], '入力バリデーションの実装'),
    task('t3', [], 'エラーハンドリング'),
  ];
  // Seed 002's replan: 認証 and バリデーション are gone.
  const replanned = [task('n1', [], 'ユーザー管理機能の実装'), task('n2', [], 'API実装')];
  const seedTerms = required('認証', 'バリデーション');

  it('keeps the original plan valid with nothing lost', () => {
    const result = validateStructure(original, original, config(), seedTerms);
    expect(result.isValid).toBe(true);
    expect(result.hasTermLoss).toBe(false);
    expect(result.termPreservation).toEqual({
      preserved: ['認証', 'バリデーション'],
      missing: [],
      preservationRate: 1,
    });
  });

  it("detects the seed's replan losing 認証 and バリデーション", () => {
    const result = validateStructure(original, replanned, config(), seedTerms);
    expect(result.hasTermLoss).toBe(true);
    expect(result.termPreservation?.missing).toEqual(['認証', 'バリデーション']);
  });

  it('only warns about term loss by default (treatTermLossAsStructureBreak off)', () => {
    const result = validateStructure(original, replanned, config(), seedTerms);
    expect(result.isValid).toBe(true);
    expect(result.problems).toEqual([]);
  });

  it('breaks on term loss when treatTermLossAsStructureBreak is on, naming the terms', () => {
    const result = validateStructure(
      original,
      replanned,
      config({ treatTermLossAsStructureBreak: true }),
      seedTerms,
    );
    expect(result.isValid).toBe(false);
    expect(result.problems).toHaveLength(1);
    expect(result.problems[0]).toContain('"認証", "バリデーション"');
  });

  it('skips the check when enableTermPreservationCheck is off', () => {
    const result = validateStructure(
      original,
      replanned,
      config({ enableTermPreservationCheck: false, treatTermLossAsStructureBreak: true }),
      seedTerms,
    );
    expect(result.isValid).toBe(true);
    expect(result.hasTermLoss).toBe(false);
    expect(result.termPreservation).toBeUndefined();
  });

  it('skips the check when no required terms are given', () => {
    const result = validateStructure(
      original,
      replanned,
      config({ treatTermLossAsStructureBreak: true, customRequiredTerms: ['監査'] }),
    );
    expect(result.termPreservation).toBeUndefined();
    expect(result.hasTermLoss).toBe(false);
  });

  describe('minPreservationRate boundary (5 terms, default minimum 0.8)', () => {
    const terms = required('alpha', 'bravo', 'charlie', 'delta', 'echo');
    const breakOnLoss = config({ treatTermLossAsStructureBreak: true });

    it('accepts a rate exactly at the minimum (4 of 5), still flagging the loss', () => {
      const plan = [task('a', [], 'alpha bravo charlie delta')];
      const result = validateStructure(plan, plan, breakOnLoss, terms);
      expect(result.termPreservation?.preservationRate).toBe(0.8);
      expect(result.isValid).toBe(true);
      expect(result.hasTermLoss).toBe(true);
    });

    it('breaks on a rate just below the minimum (3 of 5)', () => {
      const plan = [task('a', [], 'alpha bravo charlie')];
      const result = validateStructure(plan, plan, breakOnLoss, terms);
      expect(result.isValid).toBe(false);
      expect(result.problems[0]).toContain('"delta", "echo"');
    });
  });

  it('also requires config.customRequiredTerms', () => {
    const result = validateStructure(
      original,
      original,
      config({ customRequiredTerms: ['監査ログ'] }),
      seedTerms,
    );
    expect(result.termPreservation?.missing).toEqual(['監査ログ']);
    expect(result.hasTermLoss).toBe(true);
  });

  it('counts a custom term equal to a required one once', () => {
    const result = validateStructure(
      original,
      original,
      config({ customRequiredTerms: ['認証'] }),
      seedTerms,
    );
    expect(result.termPreservation?.preserved).toEqual(['認証', 'バリデーション']);
  });

  it('passes an empty term list with rate 1', () => {
    const result = validateStructure(original, original, config(), required());
    expect(result.termPreservation?.preservationRate).toBe(1);
    expect(result.hasTermLoss).toBe(false);
  });
});

describe("validateReplacementTerms: a task replan keeps its task's required terms (seed 001 + 002)", () => {
  const terms = required('認証', 'バリデーション', 'audit');
  const original = { title: '認証とバリデーション', acceptance: 'login works', context: '' };
  const keepsBoth = [
    { acceptance: '認証 API を作る' },
    { acceptance: 'input checked', context: 'バリデーション rules' },
  ];

  it('finds no loss when the subtasks carry every term the task carried', () => {
    const result = validateReplacementTerms(terms, original, keepsBoth, config());
    expect(result).toEqual({
      termPreservation: { preserved: ['認証', 'バリデーション'], missing: [], preservationRate: 1 },
      hasTermLoss: false,
    });
  });

  it("counts only the task's own terms: one it never carried is not the Replanner's to keep", () => {
    // "audit" is a required term, but not in this task: the subtasks need not carry it.
    const result = validateReplacementTerms(terms, original, keepsBoth, config());
    expect(result.termPreservation?.missing).not.toContain('audit');
    const carriesNone = { acceptance: 'tidy the README' };
    expect(validateReplacementTerms(terms, carriesNone, [{ acceptance: 'x' }], config())).toEqual({
      termPreservation: { preserved: [], missing: [], preservationRate: 1 },
      hasTermLoss: false,
    });
  });

  it('warns by default about a lost term, naming it, without a problem', () => {
    const result = validateReplacementTerms(terms, original, keepsBoth.slice(0, 1), config());
    expect(result.hasTermLoss).toBe(true);
    expect(result.termPreservation).toEqual({
      preserved: ['認証'],
      missing: ['バリデーション'],
      preservationRate: 0.5,
    });
    expect(result.problem).toBeUndefined();
  });

  it('is a problem under treatTermLossAsStructureBreak below minPreservationRate only', () => {
    const strict = config({ treatTermLossAsStructureBreak: true });
    expect(validateReplacementTerms(terms, original, keepsBoth.slice(0, 1), strict).problem).toBe(
      'Required terms missing after replan: "バリデーション" (the subtasks keep 50% of the ' +
        "task's, minimum 80%).",
    );
    const lenient = config({ treatTermLossAsStructureBreak: true, minPreservationRate: 0.5 });
    const atMinimum = validateReplacementTerms(terms, original, keepsBoth.slice(0, 1), lenient);
    expect(atMinimum.hasTermLoss).toBe(true);
    expect(atMinimum.problem).toBeUndefined();
  });

  it('counts customRequiredTerms the task carried too', () => {
    const withCustom = config({ customRequiredTerms: ['login'] });
    const result = validateReplacementTerms(terms, original, keepsBoth, withCustom);
    expect(result.termPreservation?.missing).toEqual(['login']);
  });

  it('checks nothing when enableTermPreservationCheck is off', () => {
    const off = config({ enableTermPreservationCheck: false, treatTermLossAsStructureBreak: true });
    expect(validateReplacementTerms(terms, original, [{ acceptance: 'x' }], off)).toEqual({
      hasTermLoss: false,
    });
  });
});

describe('taskCapProblem (budget.maxTasks)', () => {
  it('allows a session up to the cap, the cap itself included', () => {
    expect(taskCapProblem({ held: 0, added: 10_000, maxTasks: 10_000 })).toBeUndefined();
    expect(taskCapProblem({ held: 9_998, added: 2, maxTasks: 10_000 })).toBeUndefined();
    expect(taskCapProblem({ held: 0, added: 1, maxTasks: 1 })).toBeUndefined();
  });

  it('names a plan over the cap by its own size', () => {
    expect(taskCapProblem({ held: 0, added: 10_001, maxTasks: 10_000 })).toBe(
      'the plan has 10,001 tasks, more than budget.maxTasks allows (10,000)',
    );
  });

  it('names subtasks over the cap by the total they would bring the session to', () => {
    expect(taskCapProblem({ held: 9_999, added: 2, maxTasks: 10_000 })).toBe(
      '2 subtasks would bring the session to 10,001 tasks, more than budget.maxTasks allows (10,000)',
    );
  });
});
