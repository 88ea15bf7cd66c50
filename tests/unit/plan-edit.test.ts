import { describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/shared/config/load.js';
import { callerLimitIssues } from '../../src/shared/config/caller-limits.js';
import { checkPlanEdit } from '../../src/shared/rules/plan-edit.js';
import { PlanBreakdown, type PlannedTask } from '../../src/shared/domain/plan.js';

const config = parseConfig({});
const requiredTerms = { terms: ['認証', 'バリデーション'], source: 'user-input' as const };
const task = (id: string, title: string, dependencies: string[] = []): PlannedTask => ({
  id,
  title,
  acceptance: 'done',
  context: '',
  scopePaths: [],
  dependencies,
});
const waiting = PlanBreakdown.parse({
  tasks: [task('t1', '認証を実装'), task('t2', 'バリデーションを実装', ['t1'])],
});

const check = (tasks: PlannedTask[], allowTermLoss = false, maxTasks = 100) =>
  checkPlanEdit({
    waiting,
    edited: { summary: '', tasks },
    config: config.refinement,
    requiredTerms,
    maxTasks,
    allowTermLoss,
  });

describe('checkPlanEdit: a person edits a waiting plan (issue 48)', () => {
  it('accepts an added task with a dependency', () => {
    const result = check([...waiting.tasks, task('t3', 'レビュー', ['t2'])]);
    expect(result).toMatchObject({ accepted: true, problems: [], droppedTerms: [] });
  });

  it('accepts a changed title that keeps every required term', () => {
    expect(check([task('t1', '認証 (OAuth)'), task('t2', 'バリデーション', ['t1'])]).accepted).toBe(
      true,
    );
  });

  it.each([
    [
      'a dependency cycle',
      [task('t1', '認証', ['t2']), task('t2', 'バリデーション', ['t1'])],
      /cycle/i,
    ],
    [
      'a dependency on an unknown task',
      [task('t1', '認証 バリデーション', ['nope'])],
      /not in the plan/,
    ],
    ['a duplicate id', [task('t1', '認証'), task('t1', 'バリデーション')], /used by 2 tasks/],
    [
      'a task count change past both limits',
      [
        task('t1', '認証 バリデーション'),
        ...['a', 'b', 'c', 'd', 'e', 'f'].map((id) => task(id, id)),
      ],
      /Task count changed from 2 to 7/,
    ],
  ])('refuses %s, as a replan is refused', (_, tasks, problem) => {
    const result = check(tasks);
    expect(result.accepted).toBe(false);
    expect(result.problems.join(' ')).toMatch(problem);
  });

  it('refuses an edit that drops a required term, naming it', () => {
    const result = check([task('t1', '認証を実装')]);
    expect(result.accepted).toBe(false);
    expect(result.droppedTerms).toEqual(['バリデーション']);
    expect(result.problems[0]).toContain('"バリデーション"');
    expect(result.problems[0]).toContain('allowTermLoss');
  });

  it('accepts the same edit when it says the loss is meant, still naming the dropped term', () => {
    const result = check([task('t1', '認証を実装')], true);
    expect(result).toMatchObject({ accepted: true, droppedTerms: ['バリデーション'] });
  });

  it('refuses more tasks than budget.maxTasks', () => {
    const result = check(waiting.tasks, false, 1);
    expect(result.accepted).toBe(false);
    expect(result.problems.join(' ')).toMatch(/maxTasks/);
  });
});

describe('what a remote submit may set of approval', () => {
  const operator = parseConfig({ approval: { plan: 'required' } });
  it('may not waive an approval the server requires', () => {
    const chosen = parseConfig({ approval: { plan: 'off' } });
    expect(callerLimitIssues(operator, chosen, []).map((i) => i.path)).toEqual([
      'config.approval.plan',
    ]);
  });

  it('may not approve on a timeout of its own where the server does not', () => {
    const chosen = parseConfig({
      approval: { plan: 'required', timeoutSeconds: 1, onTimeout: 'approve' },
    });
    expect(callerLimitIssues(operator, chosen, []).map((i) => i.path)).toEqual([
      'config.approval.onTimeout',
    ]);
  });

  it('may ask for an approval the server does not require', () => {
    const chosen = parseConfig({ approval: { plan: 'required' } });
    expect(callerLimitIssues(parseConfig({}), chosen, [])).toEqual([]);
  });
});
