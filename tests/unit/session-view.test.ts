import { describe, expect, it } from 'vitest';
import { HistoryEntry } from '../../src/shared/domain/history.js';
import { Task, type TaskInput } from '../../src/shared/domain/task.js';
import { entryView } from '../../src/producers/http/ui/history-view.js';
import { html, raw } from '../../src/producers/http/ui/html.js';
import { viewPathOfJob } from '../../src/producers/http/ui/links.js';
import { progressOf } from '../../src/producers/http/ui/sessions-page.js';
import { sessionBody } from '../../src/producers/http/ui/session-page.js';
import { Session } from '../../src/shared/domain/session.js';
import { usageFromHash } from '../../src/shared/store/usage-store.js';
import { graphEdges, taskGraphSvg } from '../../src/producers/http/ui/task-graph.js';
import { taskJobs } from '../../src/producers/http/ui/task-page.js';
import { questionsView, stepsView } from '../../src/producers/http/ui/wait-view.js';

const task = (input: Omit<TaskInput, 'title' | 'acceptance'> & { title?: string }): Task =>
  Task.parse({ title: `title of ${input.id}`, acceptance: 'a', ...input });

describe('the session view, pure parts', () => {
  it('escapes interpolated text but keeps nested markup', () => {
    const name = '<script>alert("x")</script>';
    expect(html`<p>${name}</p>`.text).toBe(
      '<p>&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;</p>',
    );
    const list = html`<ul>
      ${['a', 'b'].map((x) => html`<li>${x}</li>`)}
    </ul>`;
    expect(list.text.replace(/\s+/g, '')).toBe('<ul><li>a</li><li>b</li></ul>');
    expect(html`${raw('<b>')}${undefined}${false}`.text).toBe('<b>');
  });

  it('draws current dependencies and replaced-by edges, skipping unknown tasks', () => {
    const tasks = [
      task({ id: 't1' }),
      task({
        id: 't2',
        dependencies: ['t1'],
        state: 'REPLACED_BY_REPLAN',
        replanningInfo: { iteration: 1, maxIterations: 3, replacedBy: ['s1', 's2'] },
      }),
      task({ id: 's1', dependencies: ['t1'] }),
      task({ id: 's2', dependencies: ['s1'] }),
      task({ id: 't3', dependencies: ['s2', 'gone'] }),
    ];
    expect(graphEdges(tasks)).toEqual([
      { from: 't1', to: 't2', kind: 'depends' },
      { from: 't2', to: 's1', kind: 'replaced' },
      { from: 't2', to: 's2', kind: 'replaced' },
      { from: 't1', to: 's1', kind: 'depends' },
      { from: 's1', to: 's2', kind: 'depends' },
      { from: 's2', to: 't3', kind: 'depends' },
    ]);
  });

  it('lays out every task as a node with its state, and escapes titles', () => {
    const svg = taskGraphSvg(
      [task({ id: 'A', title: '<A & co>' }), task({ id: 'B', dependencies: ['A'], state: 'DONE' })],
      (id) => `/ui/sessions/s/tasks/${id}`,
    );
    expect(svg).toContain('data-task="A" data-state="READY"');
    expect(svg).toContain('data-task="B" data-state="DONE"');
    expect(svg).toContain('&lt;A &amp; co&gt;');
    expect(svg).toMatch(/<path class="edge edge-depends" data-from="A" data-to="B" d="M[\d.]+,/);
  });

  it('counts a replaced task as its subtasks in the progress', () => {
    const tasks = [
      task({ id: 'a', state: 'DONE' }),
      task({ id: 'b', state: 'REPLACED_BY_REPLAN' }),
      task({ id: 'c', state: 'RUNNING' }),
    ];
    expect(progressOf(tasks)).toEqual({ done: 1, total: 2 });
  });

  it("names a task's work and judge jobs per attempt, and its replan job", () => {
    expect(taskJobs('s', task({ id: 'x', attempts: 2 }))).toEqual([
      { queue: 'work', jobId: 'work|s|x|1' },
      { queue: 'judge', jobId: 'judge-task|s|x|1' },
      { queue: 'work', jobId: 'work|s|x|2' },
      { queue: 'judge', jobId: 'judge-task|s|x|2' },
    ]);
    const replaced = task({
      id: 'y',
      attempts: 1,
      replanningInfo: { iteration: 1, maxIterations: 3, replacedBy: ['z'] },
    });
    expect(taskJobs('s', replaced).at(-1)).toEqual({ queue: 'replan', jobId: 'replan|s|y|1' });
  });

  it('names the work jobs that resumed an execution after a person answered its step wait', () => {
    const answered = (waitId: string) =>
      HistoryEntry.parse({
        timestamp: '2026-11-28T00:00:00.000Z',
        sessionId: 's',
        taskId: 'x-1',
        type: 'wait',
        action: 'answered',
        waitId,
        kind: waitId.startsWith('ask-') ? 'question' : 'step-approval',
      });
    expect(
      taskJobs('s', task({ id: 'x-1', attempts: 1 }), [
        answered('step-x-1-1-2'),
        answered('ask-x-1-1-5'),
      ]).filter((j) => j.queue === 'work'),
    ).toEqual([
      { queue: 'work', jobId: 'work|s|x-1|1' },
      { queue: 'work', jobId: 'work|s|x-1|1|step-x-1-1-2' },
      { queue: 'work', jobId: 'work|s|x-1|1|ask-x-1-1-5' },
    ]);
  });

  it('names the judge job of the later delivery whose result was judged', () => {
    const result = {
      output: 'o',
      log: '',
      artifacts: [],
      tokenUsage: { inputTokens: 0, outputTokens: 0 },
      durationMs: 1,
    };
    const execution = (attempt: number, fence?: number) =>
      HistoryEntry.parse({
        timestamp: '2026-11-27T00:00:00.000Z',
        sessionId: 's',
        taskId: 'x',
        type: 'execution',
        attempt,
        result,
        ...(fence ? { fence } : {}),
      });
    const jobs = taskJobs('s', task({ id: 'x', attempts: 2 }), [execution(1, 3), execution(2)]);
    expect(jobs.filter((j) => j.queue === 'judge').map((j) => j.jobId)).toEqual([
      'judge-task|s|x|1|f3',
      'judge-task|s|x|2',
    ]);
  });

  it("points a job's payload to its task's or session's page", () => {
    expect(viewPathOfJob({ sessionId: 's1', taskId: 't.1' })).toBe('/ui/sessions/s1/tasks/t.1');
    expect(viewPathOfJob({ sessionId: 's1', attempt: 0 })).toBe('/ui/sessions/s1');
    expect(viewPathOfJob({ sessionId: '../x' })).toBeUndefined();
    expect(viewPathOfJob('text')).toBeUndefined();
  });
});

describe("the session view's history cards", () => {
  it("shows a command executor's checks as a table, and its log", () => {
    const card = entryView({
      type: 'execution',
      timestamp: '2026-01-01T00:00:00.000Z',
      sessionId: 's',
      taskId: 't',
      attempt: 1,
      result: {
        output: 'Agent exited 0',
        log: 'commit abc on branch orq/s/t',
        artifacts: [
          {
            kind: 'git',
            path: '/repo',
            meta: {
              branch: 'orq/s/t',
              checks: [
                { name: 'tests', mode: 'block', passed: true, exitCode: 0 },
                { name: 'lint', mode: 'warn', passed: false, exitCode: 1 },
              ],
            },
          },
        ],
        tokenUsage: { inputTokens: 1, outputTokens: 2 },
        durationMs: 5,
      },
    }).text;
    expect(card).toContain('<tr data-check="tests" data-passed="true">');
    expect(card).toContain('<tr data-check="lint" data-passed="false">');
    expect(card).toContain('<dd data-field="branch">orq/s/t</dd>');
    expect(card).toContain('commit abc on branch orq/s/t');
  });

  it("shows an agent's steps, reflections and revisions", () => {
    const base = { timestamp: '2026-01-01T00:00:00.000Z', sessionId: 's', taskId: 't' };
    const step = entryView({ ...base, type: 'action', tool: 'read_file', input: { path: 'a' } });
    expect(step.text).toContain('Step: read_file');
    const reflection = entryView({ ...base, type: 'reflection', evaluation: { verdict: 'ok' } });
    expect(reflection.text).toContain('<dd data-field="verdict">ok</dd>');
    const revision = entryView({ ...base, type: 'revision', reason: 'plan changed', changes: [] });
    expect(revision.text).toContain('plan changed');
  });
});

describe('the session page says who made what it shows', () => {
  const page = (config: object) =>
    sessionBody({
      session: Session.parse({
        id: 's1',
        instruction: 'Implement login',
        state: 'COMPLETED',
        createdAt: '2026-01-01T00:00:00.000Z',
        updatedAt: '2026-01-01T00:00:00.000Z',
        requiredTerms: { terms: [], source: 'user-input' },
        config,
        planning: {},
      }),
      tasks: [],
      usage: usageFromHash({}),
      history: [],
      result: undefined,
      readOnly: true,
      now: Date.parse('2026-01-01T00:01:00.000Z'),
    }).text;

  it('marks a session the builtin provider ran, a scenario-scripted one included', () => {
    for (const config of [{}, { llm: { scenario: '/x/replan-task.yaml' } }]) {
      expect(page(config)).toContain(
        '<p class="builtin-note" role="note" data-builtin="true">No model ran this session: the builtin provider (a rule set, not an LLM) planned, judged and executed it.',
      );
    }
  });

  it('has no such mark when a model played every role', () => {
    expect(page({ llm: { default: { provider: 'openai', model: 'gpt-4o-mini' } } })).not.toContain(
      'builtin-note',
    );
  });
});

describe('the session page of a session integrating', () => {
  it('names the phase its integration is in', () => {
    const text = sessionBody({
      session: Session.parse({
        id: 's1',
        instruction: 'Implement login',
        state: 'INTEGRATING',
        createdAt: '2026-01-01T00:00:00.000Z',
        updatedAt: '2026-01-01T00:00:00.000Z',
        requiredTerms: { terms: [], source: 'user-input' },
        config: {},
        planning: {},
        integration: {
          round: 1,
          phase: 'judging',
          outcome: {
            status: 'merged',
            repository: '/repo',
            branch: 'orq/s1/result',
            commit: 'c0ffee0123456789',
            baseCommit: 'b',
            strategy: 'merge',
            tasks: [],
          },
        },
      }),
      tasks: [],
      usage: usageFromHash({}),
      history: [],
      result: undefined,
      readOnly: true,
      now: Date.parse('2026-01-01T00:01:00.000Z'),
    }).text;
    expect(text).toContain(
      '<dd data-field="integration">final judgement (round 1): the judge reviews orq/s1/result at c0ffee012345</dd>',
    );
  });
});

describe('the session view of waits that end on their own (approval.stepTimeoutSeconds)', () => {
  const at = '2026-11-28T00:01:00.000Z';
  const session = Session.parse({
    id: 's',
    instruction: 'i',
    state: 'RUNNING',
    createdAt: at,
    updatedAt: at,
    requiredTerms: { terms: [], source: 'user-input' },
    config: {},
    planning: {},
    stepWaits: [
      {
        id: 'step-t1-1-2',
        kind: 'step-approval',
        openedAt: at,
        timeoutAt: at,
        onTimeout: 'approve',
        taskId: 't1',
        attempt: 1,
        step: 2,
        tool: 'write_file',
        input: { path: 'a' },
        rule: 'tool write_file',
      },
    ],
    questions: [
      {
        id: 'ask-t1-1-3',
        kind: 'question',
        openedAt: at,
        timeoutAt: at,
        taskId: 't1',
        attempt: 1,
        step: 3,
        question: 'Staging?',
        reason: 'the agent asked a person at step 3',
      },
    ],
  });
  const text = (view: unknown) => String(view).replace(/\s+/g, ' ');

  it('shows when a step is approved or rejected on its own', () => {
    expect(text(stepsView(session, false))).toContain(
      `Nobody answering, it is <strong>approved</strong> at <time datetime="${at}">${at}</time>.`,
    );
  });

  it("shows when an agent's question goes on without an answer", () => {
    expect(text(questionsView(session, true))).toContain(
      `Nobody answering, the agent goes on without an answer at <time datetime="${at}">${at}</time>.`,
    );
  });
});
