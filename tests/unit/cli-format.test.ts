import { describe, expect, it } from 'vitest';
import type { SessionView } from '../../src/producers/client.js';
import {
  clipToWidth,
  displayWidth,
  formatElapsed,
  formatHistoryEntry,
  formatLiveView,
  formatOutcomeNotice,
  formatSessionTable,
  formatTaskCounts,
  missingRolesNotice,
  questionLines,
  stepLines,
} from '../../src/producers/cli/format.js';
import { followMode } from '../../src/producers/cli/follow.js';
import { BUDGET_RESUME_HINT } from '../../src/shared/budget.js';
import { ExitCode, exitCodeFor } from '../../src/producers/cli/run-cli.js';
import type { HistoryEntry } from '../../src/shared/domain/history.js';
import { Session, type SessionState } from '../../src/shared/domain/session.js';
import { Task, type TaskState } from '../../src/shared/domain/task.js';
import { OrqError } from '../../src/shared/errors.js';
import { usageFromHash } from '../../src/shared/store/usage-store.js';

const now = '2026-01-02T03:04:05.000Z';
/** The ISO time `seconds` after `now`. */
const at = (seconds: number) => new Date(Date.parse(now) + seconds * 1000).toISOString();

function view(state: SessionState, tasks: [string, TaskState, string?][]): SessionView {
  return {
    session: Session.parse({
      id: 's1',
      instruction: '認証機能とバリデーションを実装して',
      state,
      createdAt: now,
      updatedAt: now,
      requiredTerms: { terms: [], source: 'user-input' },
      config: {},
      planning: {},
    }),
    tasks: tasks.map(([id, taskState, title]) =>
      Task.parse({ id, title: title ?? `Task ${id}`, acceptance: 'done', state: taskState }),
    ),
    counters: { open: 0, active: 0 },
    usage: usageFromHash({}),
    progress: {},
    queued: [],
    ranByBuiltin: true,
    builtinRoles: ['planner', 'judge', 'worker', 'replanner'],
  };
}

const entry = (to: string): HistoryEntry => ({
  type: 'state_change',
  entity: 'session',
  to,
  timestamp: now,
  sessionId: 's1',
});

describe('the live view of orq watch', () => {
  it('shows the session state, counts by task state, the task table and recent history', () => {
    const frame = formatLiveView(
      view('RUNNING', [
        ['t1', 'DONE'],
        ['t2', 'RUNNING'],
        ['t3', 'READY'],
      ]),
      [entry('PLANNING'), entry('RUNNING')],
    );
    expect(frame).toContain('session s1  RUNNING');
    expect(frame).toContain('3 tasks: 1 READY · 1 RUNNING · 1 DONE');
    expect(frame).toMatch(/TASK\s+STATE\s+ATTEMPTS\s+TIME\s+TITLE/);
    expect(frame).toMatch(/^t2\s+RUNNING\s+0\s+-\s+Task t2$/m);
    expect(frame).toMatch(/recent:\n.*PLANNING\n.*RUNNING$/);
  });

  it('never uses more rows than the terminal has, and keeps running and blocked tasks in view', () => {
    const tasks: [string, TaskState][] = Array.from({ length: 200 }, (_, i) => [
      `t${i}`,
      i === 150 ? 'RUNNING' : i === 190 ? 'BLOCKED' : 'DONE',
    ]);
    const frame = formatLiveView(view('RUNNING', tasks), [entry('RUNNING')], { rows: 20 });
    const lines = frame.split('\n');
    expect(lines.length).toBeLessThan(20);
    expect(frame).toMatch(/^t150\s+RUNNING/m);
    expect(frame).toMatch(/^t190\s+BLOCKED/m);
    const shown = lines.filter((l) => /^t\d+\s/.test(l)).length;
    expect(frame).toContain(`… ${200 - shown} more`);
  });

  it('clips every line to the terminal width, counting wide characters as two columns', () => {
    const title = 'ユーザー認証機能を実装してセッション管理とバリデーションも追加する'.repeat(3);
    const frame = formatLiveView(view('RUNNING', [['t1', 'RUNNING', title]]), [], { columns: 40 });
    for (const line of frame.split('\n')) expect(displayWidth(line)).toBeLessThan(40);
    expect(frame).toContain('…');
  });

  it('shows a long title whole while following in a terminal wide enough, as the status table does not', () => {
    const title = `Write the parser ${'and its error messages '.repeat(4)}`.trim();
    const running = view('RUNNING', [['t1', 'RUNNING', title]]);
    expect(formatLiveView(running, [], { rows: 40, columns: 200 })).toContain(title);
    expect(formatSessionTable(running)).not.toContain(title);
  });

  it('says where planning stands while the session plans', () => {
    const planning = view('PLANNING', []);
    expect(formatLiveView(planning, [])).toContain(
      'planning: the first plan is being made or judged',
    );
    planning.session.planning.attempt = 1;
    planning.session.planning.refinementHistory = [
      {
        decision: 'replan',
        reasonCode: 'quality_below_threshold',
        reason: 'score 62 is below the threshold 80',
        currentScore: 62,
        attemptCount: 1,
        suggestionReplanCount: 0,
      },
    ];
    expect(formatSessionTable(planning)).toContain(
      'planning: plan 2 (replan 1) is being made or judged; the last plan got score 62 → replan: score 62 is below the threshold 80',
    );
    expect(formatLiveView(view('RUNNING', []), [])).not.toContain('planning:');
  });

  it("ends with a final frame whose task table is the status table's, every column and row alike", () => {
    const done = view('COMPLETED', [
      ['t1', 'DONE', 'Write the parser'],
      ['t2', 'DONE', 'Write the tests'],
    ]);
    const [first, second] = done.tasks as [Task, Task];
    Object.assign(first, { attempts: 1, startedAt: at(0), endedAt: at(2) });
    Object.assign(second, { attempts: 2, startedAt: at(3), endedAt: at(15), dependencies: ['t1'] });
    done.usage = usageFromHash({ 'task:t1:in': '120', 'task:t1:out': '45' });
    const later = Date.parse(now) + 60_000;
    const statusTable = formatSessionTable(done, later).split('\n');
    const table = statusTable.slice(statusTable.findIndex((l) => l.startsWith('TASK')));
    expect(table).toHaveLength(3);
    expect(table[0]).toMatch(
      /^TASK\s+STATE\s+ATTEMPTS\s+TIME\s+DEPENDS ON\s+TOKENS IN\/OUT\s+TITLE$/,
    );

    const size = { rows: 40, columns: 200 };
    const final = formatLiveView(done, [entry('COMPLETED')], { ...size, final: true }, later);
    const lines = final.split('\n');
    expect(lines.slice(lines.indexOf(table[0] ?? ''), lines.indexOf(table[0] ?? '') + 3)).toEqual(
      table,
    );
    // While following, the compact columns leave a narrow terminal room for the titles.
    const following = formatLiveView(done, [entry('COMPLETED')], size, later);
    expect(following).toMatch(/^TASK\s+STATE\s+ATTEMPTS\s+TIME\s+TITLE$/m);
    expect(following).toMatch(/^t2\s+DONE\s+2\s+12s\s+Write the tests$/m);
  });

  it('tells a blocked session how to go on', () => {
    const frame = formatLiveView(view('BLOCKED', [['t1', 'BLOCKED']]), []);
    expect(frame).toContain('orq resume s1');
  });
});

describe('formatHistoryEntry', () => {
  const execution = (result: { output: string; error?: string }): HistoryEntry =>
    ({
      type: 'execution',
      sessionId: 's',
      taskId: 't2',
      timestamp: '2026-01-02T03:04:05.000Z',
      attempt: 1,
      result: {
        log: '',
        artifacts: [],
        tokenUsage: { inputTokens: 0, outputTokens: 0 },
        durationMs: 0,
        ...result,
      },
    }) as HistoryEntry;

  it("shows an execution's first line of output, or its error when it failed with none", () => {
    expect(formatHistoryEntry(execution({ output: 'built it\nmore' }))).toMatch(
      /\] t2 executed attempt 1: built it$/,
    );
    expect(
      formatHistoryEntry(execution({ output: '', error: 'denied: requested access is denied' })),
    ).toMatch(/\] t2 executed attempt 1: failed: denied: requested access is denied$/);
  });
});

describe('text helpers', () => {
  it('clipToWidth keeps short text and ends cut text with an ellipsis within the width', () => {
    expect(clipToWidth('abc', 3)).toBe('abc');
    expect(clipToWidth('abcdef', 4)).toBe('abc…');
    expect(clipToWidth('認証認証', 5)).toBe('認証…');
    expect(displayWidth('認証ab')).toBe(6);
  });

  it('counts tasks by state in the order of the task lifecycle', () => {
    const { tasks } = view('RUNNING', [
      ['a', 'DONE'],
      ['b', 'READY'],
      ['c', 'DONE'],
    ]);
    expect(formatTaskCounts(tasks)).toBe('3 tasks: 1 READY · 2 DONE');
    expect(formatTaskCounts([])).toBe('0 tasks');
  });

  it('tells executing tasks that no worker has taken yet from those that run', () => {
    const v = view('RUNNING', [
      ['run', 'RUNNING'],
      ['wait1', 'RUNNING'],
      ['wait2', 'RUNNING'],
      ['more', 'NEEDS_CONTINUATION'],
      ['done', 'DONE'],
    ]);
    for (const task of v.tasks) task.startedAt = at(0);
    v.queued = ['wait1', 'wait2', 'more'];
    const later = Date.parse(now) + 12_500;
    expect(formatTaskCounts(v.tasks, v.queued)).toBe(
      '5 tasks: 3 RUNNING (2 queued) · 1 NEEDS_CONTINUATION (1 queued) · 1 DONE',
    );
    const table = formatSessionTable(v, later);
    expect(table).toContain('3 RUNNING (2 queued)');
    expect(table).toMatch(/^run\s+RUNNING\s+0\s+12s\s/m);
    // A task's time runs from its dispatch, queued or not.
    expect(table).toMatch(/^wait1\s+RUNNING \(queued\)\s+0\s+12s\s/m);
    expect(table).toMatch(/^more\s+NEEDS_CONTINUATION \(queued\)\s+0\s+12s\s/m);
    const frame = formatLiveView(v, [], { rows: 40, columns: 200 }, later);
    expect(frame).toMatch(/^wait2\s+RUNNING \(queued\)\s+0\s+12s\s/m);
    expect(frame).toContain('3 RUNNING (2 queued)');
  });

  it('the status table lists each task with its state, attempts, time and dependencies', () => {
    const table = formatSessionTable(view('COMPLETED', [['t1', 'DONE']]));
    expect(table).toMatch(/^TASK\s+STATE\s+ATTEMPTS\s+TIME\s+DEPENDS ON\s.*TITLE$/m);
    expect(table).toMatch(/^t1\s+DONE\s+0\s+-\s+-\s.*Task t1$/m);
  });

  it('times a task from its latest start to its end, or to now while it runs', () => {
    const timed = view('RUNNING', [
      ['done', 'DONE'],
      ['running', 'RUNNING'],
      ['waiting', 'READY'],
      ['next', 'READY'],
    ]);
    const [done, running, waiting] = timed.tasks as [Task, Task, Task];
    Object.assign(done, { startedAt: at(0), endedAt: at(4.25) });
    Object.assign(running, { startedAt: at(10) });
    waiting.pendingDependencies = 2;
    const later = Date.parse(now) + 195_000;
    const table = formatSessionTable(timed, later);
    expect(table).toMatch(/^done\s+DONE\s+0\s+4\.3s\s/m);
    expect(table).toMatch(/^running\s+RUNNING\s+0\s+3m 05s\s/m);
    expect(table).toMatch(/^waiting\s+READY \(waits for 2\)\s+0\s+-\s/m);
    expect(table).toMatch(/^next\s+READY\s+0\s+-\s/m);
    expect(formatLiveView(timed, [], {}, later)).toMatch(/^running\s+RUNNING\s+0\s+3m 05s\s/m);
  });

  it("says what executing tasks report doing, under the table, and not a finished task's report", () => {
    const v = view('RUNNING', [
      ['a', 'RUNNING'],
      ['b', 'RUNNING'],
      ['c', 'RUNNING'],
      ['d', 'NEEDS_CONTINUATION'],
      ['quiet', 'RUNNING'],
      ['over', 'DONE'],
    ]);
    const report = (activity: string) => ({ attempt: 1, at: at(0), activity });
    v.progress = {
      a: report('agent: 12KB of output; last: Running   the\ntests'),
      b: report('step 3: action write_file'),
      c: report('check lint started'),
      d: report('agent started'),
      over: report('agent: 1KB of output'),
    };
    const later = Date.parse(now) + 4_000;
    const lines = [
      '  a: agent: 12KB of output; last: Running the tests (4.0s ago)',
      '  b: step 3: action write_file (4.0s ago)',
      '  c: check lint started (4.0s ago)',
      '  d: agent started (4.0s ago)',
    ];
    expect(formatSessionTable(v, later).split('\n').slice(-5)).toEqual(['now:', ...lines]);
    // The live view keeps room for the table: three reports, and how many more there are.
    const frame = formatLiveView(v, [], { rows: 40, columns: 200 }, later).split('\n');
    expect(frame.slice(frame.indexOf('now:'))).toEqual([
      'now:',
      ...lines.slice(0, 3),
      '  … 1 more',
    ]);
    expect(formatSessionTable(view('RUNNING', [['a', 'RUNNING']]), later)).not.toContain('now:');
  });

  it.each([
    [400, '0.4s'],
    [9_949, '9.9s'],
    [12_500, '12s'],
    [65_000, '1m 05s'],
    [3_599_000, '59m 59s'],
    [7_620_000, '2h 07m'],
    [-5, '0.0s'],
  ])('formatElapsed(%i) is %s', (ms, text) => {
    expect(formatElapsed(ms)).toBe(text);
  });
});

describe('exit codes', () => {
  it.each([
    ['NOT_FOUND', ExitCode.NOT_COMPLETED],
    ['INVALID_STATE', ExitCode.NOT_COMPLETED],
    ['VALIDATION_FAILED', ExitCode.USAGE],
    ['CONFIG_INVALID', ExitCode.USAGE],
    ['REDIS_UNAVAILABLE', ExitCode.ENVIRONMENT],
    ['REDIS_NOT_INSTALLED', ExitCode.ENVIRONMENT],
  ] as const)('%s exits %i', (code, exit) => {
    expect(exitCodeFor(new OrqError(code, 'x'))).toBe(exit);
  });
});

describe('formatOutcomeNotice', () => {
  it('says how to go on after a budget stop, and to plan again when it stopped while planning', () => {
    const stopped = view('BUDGET_EXHAUSTED', [
      ['t1', 'DONE'],
      ['t2', 'CANCELLED'],
    ]);
    stopped.session.failure = { code: 'BUDGET_EXHAUSTED', reason: 'budget exhausted: 2600 > 2500' };
    expect(formatOutcomeNotice(stopped)).toBe(
      'session s1 is BUDGET_EXHAUSTED: budget exhausted: 2600 > 2500. Run `orq resume s1 --max-tokens N` (or --max-usd X) to go on with a higher limit',
    );
    expect(formatOutcomeNotice(view('BUDGET_EXHAUSTED', []))).toBe(
      'session s1 is BUDGET_EXHAUSTED. Run `orq resume s1 --max-tokens N` (or --max-usd X) to plan again with a higher limit',
    );
  });

  it('says, after a budget stop with a question open, to raise the budget and then answer it', () => {
    const stopped = view('BUDGET_EXHAUSTED', [
      ['t1', 'CANCELLED'],
      ['t2', 'BLOCKED'],
    ]);
    stopped.session.questions = [
      {
        id: 'question-t2-1',
        kind: 'question',
        openedAt: now,
        taskId: 't2',
        attempt: 1,
        question: 'Which registry?',
        reason: 'no registry given',
      },
    ];
    expect(formatOutcomeNotice(stopped)).toBe(
      "session s1 is BUDGET_EXHAUSTED. Run `orq resume s1 --max-tokens N` (or --max-usd X) to go on with a higher limit; then answer t2's question (`orq answer s1 --task t2 TEXT`)",
    );
    expect(formatSessionTable(stopped)).toContain(
      'answer: raise the budget first (orq resume s1 --max-tokens N), then orq answer s1 --task t2 "…"',
    );
  });

  it("gives the resume command once, not also the refusal's own hint", () => {
    const stopped = view('BUDGET_EXHAUSTED', [['t1', 'CANCELLED']]);
    stopped.session.failure = {
      code: 'BUDGET_EXHAUSTED',
      reason: `The worker call execute for task t1 cannot reserve its estimate within the session budget (207 used + 0 reserved + 4000 > maxTokens 4100). ${BUDGET_RESUME_HINT}: orq resume s1 --max-tokens <n> or --max-usd <usd>`,
    };
    const notice = formatOutcomeNotice(stopped, { resumeHere: true }) ?? '';
    expect(notice.match(/orq resume/g)).toHaveLength(1);
    expect(notice).toContain('(207 used + 0 reserved + 4000 > maxTokens 4100). Run `orq resume s1');
  });

  it('suggests resuming with --run when nothing runs the roles after the command (orq run)', () => {
    const here = { resumeHere: true };
    expect(formatOutcomeNotice(view('BLOCKED', [['t2', 'BLOCKED']]), here)).toContain(
      'is BLOCKED (t2). Run `orq resume s1 --run` to retry',
    );
    expect(formatOutcomeNotice(view('BUDGET_EXHAUSTED', [['t1', 'CANCELLED']]), here)).toContain(
      'Run `orq resume s1 --max-tokens N --run` (or --max-usd X) to go on',
    );
  });

  it('names the blocked tasks, and says why a session failed', () => {
    expect(formatOutcomeNotice(view('BLOCKED', [['t2', 'BLOCKED']]))).toContain(
      'is BLOCKED (t2). Run `orq resume s1`',
    );
    const failed = view('FAILED', []);
    failed.session.failure = { code: 'PLAN_REJECTED', reason: 'stagnated' };
    expect(formatOutcomeNotice(failed)).toBe('session s1 is FAILED: PLAN_REJECTED: stagnated');
    expect(formatOutcomeNotice(view('COMPLETED', []))).toBeUndefined();
  });

  it('says why each blocked task is blocked, in the notice, the status table and the live view', () => {
    const blocked = view('BLOCKED', [
      ['t1', 'DONE'],
      ['t2', 'BLOCKED'],
    ]);
    const t2 = blocked.tasks[1] as Task;
    t2.blockedReason = 'The worker job failed: LLM_CALL_FAILED: HTTP 401';
    expect(formatOutcomeNotice(blocked)).toContain(
      'is BLOCKED (t2: The worker job failed: LLM_CALL_FAILED: HTTP 401). Run',
    );
    expect(formatSessionTable(blocked)).toContain(
      't2 is blocked: The worker job failed: LLM_CALL_FAILED: HTTP 401',
    );
    expect(formatLiveView(blocked, [])).toContain('t2 is blocked: The worker job failed');
    t2.blockedReason = 'Replanned 3 times (replanning.maxIterations).';
    expect(formatOutcomeNotice(blocked)).toContain(
      '(t2: Replanned 3 times (replanning.maxIterations)). Run',
    );
  });
});

describe('followMode', () => {
  it('draws the live frame only in a terminal that reports a size', () => {
    expect(followMode({ isTTY: true, rows: 40, columns: 120 }, false)).toBe('live');
    // A stream that does not report its size at all: log-update falls back to 80×24.
    expect(followMode({ isTTY: true }, false)).toBe('live');
    // A pty opened 0×0: log-update would fit the frame to no rows and print nothing.
    expect(followMode({ isTTY: true, rows: 0, columns: 0 }, false)).toBe('lines');
    expect(followMode({ isTTY: true, rows: 24, columns: 0 }, false)).toBe('lines');
    expect(followMode({ isTTY: false, rows: 40, columns: 120 }, false)).toBe('lines');
    expect(followMode({ isTTY: true, rows: 40, columns: 120 }, true)).toBe('jsonl');
  });
});

describe('missingRolesNotice', () => {
  const all = { coordinator: 1, planner: 2, judge: 1, worker: 4, replanner: 0 };

  it('says nothing when every role a session needs runs, replanner or not', () => {
    expect(missingRolesNotice('s1', all, 'orq')).toBeUndefined();
  });

  it('says nothing when the server cannot tell', () => {
    expect(missingRolesNotice('s1', {}, 'orq')).toBeUndefined();
  });

  it('names one missing role, the prefix and what to check', () => {
    expect(missingRolesNotice('s1', { ...all, worker: 0 }, 'team')).toBe(
      'no process runs the worker role on this Redis under the prefix "team", so session s1 ' +
        'waits (start pods with `orq start`). If your pods run, check that they use the same ' +
        'REDIS_URL and ORQ_PREFIX.',
    );
  });

  it('lists several missing roles', () => {
    const none = { coordinator: 0, planner: 0, judge: 0, worker: 0, replanner: 0 };
    expect(missingRolesNotice('s1', none, 'orq')).toMatch(
      /^no process runs the coordinator, planner, judge and worker roles on this Redis/,
    );
  });
});

describe('the waits of a running execution, with approval.stepTimeoutSeconds', () => {
  const opened = { openedAt: now, timeoutAt: at(60), taskId: 't1', attempt: 1, step: 2 };

  it('says when a step ends on its own, and how', () => {
    const wait = {
      ...opened,
      id: 'step-t1-1-2',
      kind: 'step-approval' as const,
      tool: 'run_command',
      input: { command: ['git', 'push'] },
      command: 'git push',
      rule: 'command matches /^git push/',
      onTimeout: 'reject' as const,
    };
    expect(stepLines('s1', wait)[0]).toBe(
      `waiting for a person: step approval step-t1-1-2 of task t1 (command matches /^git push/) (rejected at ${at(60)} if nobody answers)`,
    );
    expect(stepLines('s1', { ...wait, onTimeout: 'approve' })[0]).toContain(
      `(approved at ${at(60)} if nobody answers)`,
    );
  });

  it("says when an agent's question goes on without an answer", () => {
    const question = {
      ...opened,
      id: 'ask-t1-1-2',
      kind: 'question' as const,
      question: 'Staging?',
      reason: 'the agent asked a person at step 2',
    };
    expect(questionLines('s1', question)[0]).toBe(
      `waiting for a person: question ask-t1-1-2 of task t1 (the agent goes on without an answer at ${at(60)} if nobody answers)`,
    );
  });
});
