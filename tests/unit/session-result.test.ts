import { describe, expect, it } from 'vitest';
import { LlmConfig } from '../../src/shared/config/schema.js';
import { SessionResult } from '../../src/shared/domain/result.js';
import type { SessionState } from '../../src/shared/domain/session.js';
import { Task, type TaskState } from '../../src/shared/domain/task.js';
import { replaceTaskWithSubtasks } from '../../src/shared/rules/replace-task.js';
import { deriveSessionResult, type ResultSession } from '../../src/shared/rules/session-result.js';

/** A task in `state`; a DONE one has the output `out:<id>`. */
const t = (id: string, state: TaskState, dependencies: string[] = [], extra: object = {}): Task =>
  Task.parse({
    id,
    title: `title ${id}`,
    acceptance: 'a',
    state,
    dependencies,
    ...(state === 'DONE' ? { result: { output: `out:${id}` } } : {}),
    ...extra,
  });

const session = (
  state: SessionState,
  result: ResultSession['config']['result'] = { tasks: 'final' },
  failure?: ResultSession['failure'],
): ResultSession => ({
  id: 's1',
  state,
  config: { result, llm: LlmConfig.parse({}) },
  ...(failure ? { failure } : {}),
});

/** Outputs as `id` or `id<-for1+for2` (standing in), missing as `id:STATE`. */
const shape = (tasks: readonly Task[], state: SessionState = 'COMPLETED', all = false) => {
  const result = deriveSessionResult(session(state, { tasks: all ? 'done' : 'final' }), tasks);
  return {
    outputs: result.outputs.map((o) =>
      o.standsInFor ? `${o.taskId}<-${o.standsInFor.join('+')}` : o.taskId,
    ),
    missing: result.missing.map((g) => `${g.taskId}:${g.state}`),
    complete: result.complete,
  };
};

describe('deriveSessionResult: which tasks make up the result', () => {
  const A = t('A', 'DONE');
  it.each([
    {
      name: 'a chain gives its last task',
      tasks: [A, t('B', 'DONE', ['A']), t('C', 'DONE', ['B'])],
      expected: { outputs: ['C'], missing: [], complete: true },
    },
    {
      name: 'two branches give both of their ends, in plan order',
      tasks: [A, t('B', 'DONE', ['A']), t('C', 'DONE', ['A'])],
      expected: { outputs: ['B', 'C'], missing: [], complete: true },
    },
    {
      name: 'a diamond gives its join',
      tasks: [A, t('B', 'DONE', ['A']), t('C', 'DONE', ['A']), t('D', 'DONE', ['B', 'C'])],
      expected: { outputs: ['D'], missing: [], complete: true },
    },
    {
      name: 'independent tasks all count',
      tasks: [A, t('B', 'DONE')],
      expected: { outputs: ['A', 'B'], missing: [], complete: true },
    },
    {
      name: 'a skipped final task is stood in for by the done task before it',
      tasks: [A, t('B', 'SKIPPED', ['A'])],
      expected: { outputs: ['A<-B'], missing: ['B:SKIPPED'], complete: false },
    },
    {
      name: 'the stand-in is searched through skipped tasks to the nearest done one',
      tasks: [A, t('B', 'SKIPPED', ['A']), t('C', 'CANCELLED', ['B'])],
      expected: { outputs: ['A<-C'], missing: ['C:CANCELLED'], complete: false },
    },
    {
      name: 'one done task stands in for two missing ends',
      tasks: [A, t('B', 'SKIPPED', ['A']), t('C', 'SKIPPED', ['A'])],
      expected: { outputs: ['A<-B+C'], missing: ['B:SKIPPED', 'C:SKIPPED'], complete: false },
    },
    {
      name: 'a missing end with nothing done before it leaves no output',
      tasks: [t('A', 'CANCELLED'), t('B', 'CANCELLED', ['A'])],
      expected: { outputs: [], missing: ['B:CANCELLED'], complete: false },
    },
    {
      name: 'a dependency on an unknown id is ignored',
      tasks: [t('A', 'SKIPPED', ['ghost'])],
      expected: { outputs: [], missing: ['A:SKIPPED'], complete: false },
    },
  ])('$name', ({ tasks, expected }) => {
    expect(shape(tasks)).toEqual(expected);
  });
});

describe('deriveSessionResult: replans', () => {
  /** A -> T -> C, with T replaced by two subtasks (the second after the first). */
  const replanned = () =>
    replaceTaskWithSubtasks({
      tasks: [t('A', 'DONE'), t('T', 'RUNNING', ['A']), t('C', 'READY', ['T'])],
      originalTaskId: 'T',
      subtasks: [
        { id: 'x', title: 'x', acceptance: 'x', context: '', scopePaths: [], dependencies: [] },
        { id: 'y', title: 'y', acceptance: 'y', context: '', scopePaths: [], dependencies: ['x'] },
      ],
      reason: 'too big',
      maxIterations: 3,
    }).tasks;

  it('counts a replaced final task as its last subtask', () => {
    const tasks = replanned().filter((task) => task.id !== 'C');
    const done = tasks.map((task) =>
      task.state === 'READY' ? t(task.id, 'DONE', task.dependencies) : task,
    );
    expect(shape(done)).toEqual({ outputs: ['T.r1.2'], missing: [], complete: true });
  });

  it('keeps the task after a replaced one as the end', () => {
    const done = replanned().map((task) =>
      task.state === 'READY' ? t(task.id, 'DONE', task.dependencies) : task,
    );
    expect(shape(done)).toEqual({ outputs: ['C'], missing: [], complete: true });
  });

  it('reads a dependency still naming a replaced task as naming its subtasks', () => {
    const tasks = [
      t('A', 'DONE'),
      t('T', 'REPLACED_BY_REPLAN', ['A'], {
        replanningInfo: { iteration: 0, maxIterations: 3, replacedBy: ['T.r1.1'] },
      }),
      t('T.r1.1', 'DONE', ['A']),
      t('C', 'SKIPPED', ['T']),
    ];
    expect(shape(tasks)).toEqual({
      outputs: ['T.r1.1<-C'],
      missing: ['C:SKIPPED'],
      complete: false,
    });
  });
});

describe('deriveSessionResult: sessions that stopped short or still run', () => {
  it.each<{ state: SessionState; tasks: Task[]; outputs: string[]; missing: string[] }>([
    {
      state: 'BLOCKED',
      tasks: [t('A', 'DONE'), t('B', 'BLOCKED', ['A']), t('C', 'READY', ['B'])],
      outputs: ['A<-C'],
      missing: ['C:READY'],
    },
    {
      state: 'RUNNING',
      tasks: [t('A', 'DONE'), t('B', 'RUNNING', ['A'])],
      outputs: ['A<-B'],
      missing: ['B:RUNNING'],
    },
    {
      state: 'CANCELLED',
      tasks: [t('A', 'DONE'), t('B', 'CANCELLED'), t('C', 'CANCELLED', ['A'])],
      outputs: ['A<-C'],
      missing: ['B:CANCELLED', 'C:CANCELLED'],
    },
    { state: 'PLANNING', tasks: [], outputs: [], missing: [] },
    { state: 'FAILED', tasks: [], outputs: [], missing: [] },
  ])('$state: the done work so far, and what is missing', ({ state, tasks, outputs, missing }) => {
    expect(shape(tasks, state)).toEqual({ outputs, missing, complete: false });
  });

  it.each<{ state: SessionState; tasks: Task[]; failure?: ResultSession['failure']; note: string }>(
    [
      {
        state: 'BLOCKED',
        tasks: [t('A', 'DONE'), t('B', 'BLOCKED', ['A'])],
        note: 'Session s1 is BLOCKED (1 of 2 tasks finished): B waits for a resume.',
      },
      {
        state: 'RUNNING',
        tasks: [t('A', 'DONE'), t('B', 'RUNNING', ['A'])],
        note: 'Session s1 is still running (1 of 2 tasks finished): the result may still change.',
      },
      {
        state: 'PLANNING',
        tasks: [],
        note: 'Session s1 is still planning: no task has run yet.',
      },
      {
        state: 'FAILED',
        tasks: [],
        failure: { code: 'PLAN_REJECTED', reason: 'the plan stagnated.' },
        note: 'Session s1 FAILED before any task ran: the plan stagnated.',
      },
      {
        state: 'BUDGET_EXHAUSTED',
        tasks: [t('A', 'DONE'), t('B', 'CANCELLED', ['A'])],
        failure: { code: 'BUDGET_EXHAUSTED', reason: 'maxTokens 100 reached' },
        note: 'Session s1 stopped at its budget (2 of 2 tasks finished): maxTokens 100 reached.',
      },
      {
        state: 'CANCELLED',
        tasks: [t('A', 'CANCELLED')],
        note: 'Session s1 was CANCELLED (1 of 1 task finished).',
      },
    ],
  )('$state: the first note says so', ({ state, tasks, failure, note }) => {
    const result = deriveSessionResult(session(state, { tasks: 'final' }, failure), tasks);
    expect(result.notes[0]).toBe(note);
  });

  it('says which tasks gave no output and which done task stands in for them', () => {
    const result = deriveSessionResult(session('COMPLETED'), [
      t('A', 'DONE'),
      t('B', 'SKIPPED', ['A'], { judgement: { success: false, reason: 'no credentials' } }),
    ]);
    expect(result.notes).toEqual([
      'No output from B (SKIPPED): the result holds the nearest done task before, A.',
    ]);
    expect(result.missing).toEqual([
      { taskId: 'B', title: 'title B', state: 'SKIPPED', reason: 'no credentials' },
    ]);
  });

  it("gives a blocked task's reason", () => {
    const result = deriveSessionResult(session('BLOCKED'), [
      t('A', 'BLOCKED', [], { blockedReason: 'the registry refuses' }),
    ]);
    expect(result.missing[0]?.reason).toBe('the registry refuses');
  });

  it('has no notes for a completed session with every final task done', () => {
    expect(deriveSessionResult(session('COMPLETED'), [t('A', 'DONE')]).notes).toEqual([]);
  });
});

describe('deriveSessionResult: result.tasks done', () => {
  it('gives every done task in plan order, and every other standing task as missing', () => {
    const tasks = [
      t('A', 'DONE'),
      t('T', 'REPLACED_BY_REPLAN', ['A']),
      t('B', 'DONE', ['A']),
      t('C', 'SKIPPED', ['B']),
    ];
    expect(shape(tasks, 'COMPLETED', true)).toEqual({
      outputs: ['A', 'B'],
      missing: ['C:SKIPPED'],
      complete: false,
    });
  });
});

describe('deriveSessionResult: the text form', () => {
  it('is the output alone when the result has one', () => {
    const result = deriveSessionResult(session('COMPLETED'), [t('A', 'DONE')]);
    expect(result).toMatchObject({ text: 'out:A', textTruncated: false });
  });

  it('has a section per output when there are several', () => {
    const result = deriveSessionResult(session('COMPLETED'), [t('A', 'DONE'), t('B', 'DONE')]);
    expect(result.text).toBe('## A: title A\n\nout:A\n\n## B: title B\n\nout:B');
  });

  it('is empty when nothing is done', () => {
    expect(deriveSessionResult(session('PLANNING'), []).text).toBe('');
  });

  it('is cut at maxTextLength with a note, while the outputs keep all of it', () => {
    const long = 'x'.repeat(250);
    const tasks = [t('A', 'DONE', [], { result: { output: long } })];
    const result = deriveSessionResult(
      session('COMPLETED', { tasks: 'final', maxTextLength: 100 }),
      tasks,
    );
    expect(result.text).toBe(`${'x'.repeat(100)}\n[… 150 more characters]`);
    expect(result.textTruncated).toBe(true);
    expect(result.outputs[0]?.output).toBe(long);
    expect(result.notes).toEqual([
      'The text is cut at 100 characters (result.maxTextLength); the outputs hold all of it.',
    ]);
  });

  it('does not cut between the two halves of a surrogate pair', () => {
    const output = `${'x'.repeat(99)}😀${'y'.repeat(10)}`;
    const result = deriveSessionResult(
      session('COMPLETED', { tasks: 'final', maxTextLength: 100 }),
      [t('A', 'DONE', [], { result: { output } })],
    );
    expect(result.text.startsWith(`${'x'.repeat(99)}\n[… 12 more characters]`)).toBe(true);
  });

  it('is a valid SessionResult', () => {
    const result = deriveSessionResult(session('BLOCKED'), [
      t('A', 'DONE'),
      t('B', 'BLOCKED', ['A']),
    ]);
    expect(SessionResult.parse(result)).toEqual(result);
  });
});

describe('deriveSessionResult: who made it', () => {
  it('says the builtin provider made the outputs of a session with no model configured', () => {
    const result = deriveSessionResult(session('COMPLETED'), [t('A', 'DONE')]);
    expect(result).toMatchObject({
      ranByBuiltin: true,
      builtinRoles: ['planner', 'judge', 'worker', 'replanner'],
    });
    // Not a note: a complete result stays without any, as `orq result` reads them.
    expect(result.notes).toEqual([]);
  });

  it('says nothing of the builtin provider when a model played every role', () => {
    const llm = LlmConfig.parse({ default: { provider: 'openai', model: 'gpt-4o-mini' } });
    const own: ResultSession = {
      ...session('COMPLETED'),
      config: { result: { tasks: 'final' }, llm },
    };
    expect(deriveSessionResult(own, [t('A', 'DONE')])).toMatchObject({
      ranByBuiltin: false,
      builtinRoles: [],
    });
  });
});
