import { describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/shared/config/load.js';
import { Task, type TaskInput } from '../../src/shared/domain/task.js';
import {
  executorPrompt,
  outputFormat,
  plannerPrompt,
  planJudgePrompt,
  PROMPT_TEMPLATES,
  renderTemplate,
  replannerPrompt,
  taskJudgePrompt,
  templateText,
} from '../../src/workers/llm/prompts.js';

const config = (({
  refinement,
  judging,
  replanning,
  execution,
  planning,
  llm,
  budget,
  result,
  integration,
  scheduling,
  approval,
}) => ({
  refinement,
  judging,
  replanning,
  execution,
  planning,
  llm,
  budget,
  result,
  integration,
  scheduling,
  approval,
}))(parseConfig({}));

const task = (input: Partial<TaskInput> = {}): Task =>
  Task.parse({
    id: 't2',
    title: 'Implement the login API',
    acceptance: 'POST /login returns a JWT for valid credentials and 401 otherwise',
    context: 'Use the user table from t1; tokens expire after one hour',
    scopePaths: ['src/auth/login.ts', 'src/auth/jwt.ts'],
    replanningInfo: { iteration: 0, maxIterations: 3 },
    ...input,
  });

const format = outputFormat('Schema');
/** A judge's verdict asking for a replan. */
const replanVerdict = {
  success: false,
  shouldContinue: false,
  shouldReplan: true,
  reason: 'r',
  missingRequirements: [],
};
const base = { sessionId: 's1', instruction: '認証機能とバリデーションを実装して' };

describe('prompt templates', () => {
  it('every template file exists and every placeholder of each prompt gets a value', () => {
    for (const name of PROMPT_TEMPLATES) expect(templateText(name).length).toBeGreaterThan(0);
    const prompts = [
      plannerPrompt({ ...base, attempt: 0, requiredTerms: ['認証'], config }, format),
      plannerPrompt(
        {
          ...base,
          attempt: 1,
          requiredTerms: ['認証'],
          config,
          previousPlan: { summary: '', tasks: [task()] },
          feedback: { issues: ['i'], suggestions: ['s'] },
        },
        format,
      ),
      planJudgePrompt(
        { ...base, attempt: 0, requiredTerms: [], plan: { summary: '', tasks: [task()] } },
        format,
      ),
      executorPrompt({ ...base, task: task(), attempt: 1, dependencyResults: [] }, format),
      taskJudgePrompt(
        {
          ...base,
          task: task(),
          attempt: 1,
          result: {
            output: 'o',
            log: '',
            artifacts: [],
            tokenUsage: { inputTokens: 0, outputTokens: 0 },
            durationMs: 0,
          },
        },
        format,
      ),
      // judging.checkAlreadySatisfied: the task-check template, before the task runs.
      taskJudgePrompt(
        {
          ...base,
          task: task(),
          attempt: 0,
          result: {
            output: '',
            log: '',
            artifacts: [],
            tokenUsage: { inputTokens: 0, outputTokens: 0 },
            durationMs: 0,
          },
          beforeRun: {
            dependencyResults: [{ taskId: 't1', title: 'Schema', output: 'users table' }],
          },
        },
        format,
      ),
      replannerPrompt(
        {
          ...base,
          task: task(),
          iteration: 1,
          requiredTerms: [],
          judgement: replanVerdict,
        },
        format,
      ),
      // Issue 47: the final judgement of a result branch.
      taskJudgePrompt(
        {
          ...base,
          task: task(),
          attempt: 1,
          result: {
            output: '',
            log: '',
            artifacts: [],
            tokenUsage: { inputTokens: 0, outputTokens: 0 },
            durationMs: 0,
          },
          finalJudgement: finalInput,
        },
        format,
      ),
    ];
    for (const prompt of prompts) {
      expect(prompt.system).not.toMatch(/\{\{|\}\}|<!--/);
      expect(prompt.user).not.toMatch(/\{\{|\}\}|<!--/);
      expect(prompt.system).toContain('`Schema`');
    }
  });

  it('keeps sections by value and never expands template syntax inside values', () => {
    const template = '{{#a}}A={{a}}{{/a}}{{^a}}no a{{/a}} {{b}}';
    expect(renderTemplate(template, { a: 'x', b: '{{a}}' })).toBe('A=x {{a}}');
    expect(renderTemplate(template, { a: '', b: 'y' })).toBe('no a y');
    expect(() => renderTemplate('{{missing}}', {})).toThrow(/no value for \{\{missing\}\}/);
  });

  it('shows the JSON Schema in the reply format only when the provider does not enforce it', () => {
    expect(outputFormat('PlanBreakdown')).not.toContain('JSON Schema');
    const shown = outputFormat('PlanBreakdown', { type: 'object', required: ['tasks'] });
    expect(shown).toContain('JSON Schema');
    expect(shown).toContain('"required": [\n    "tasks"\n  ]');
  });
});

/** What a final judge sees of a result branch with one failing check. */
const finalInput = {
  round: 1,
  requiredTerms: ['認証', 'バリデーション'],
  branch: 'orq/s1/result',
  commit: '0123456789abcdef',
  diffStat: ' src/auth.ts | 12 ++++\n 1 file changed, 12 insertions(+)',
  tasks: [{ taskId: 't1', title: 'Login' }],
  checks: [
    { name: 'test', mode: 'block', passed: false, output: '2 tests failed' },
    { name: 'lint', mode: 'warn', passed: true },
  ],
};

describe('final judgement prompt (issue 47)', () => {
  it('shows the instruction, the required terms, the diff stat and the checks, not the task', () => {
    const prompt = taskJudgePrompt(
      {
        ...base,
        task: task(),
        attempt: 1,
        result: Task.shape.result.unwrap().parse({ output: '' }),
        finalJudgement: finalInput,
      },
      format,
    );
    expect(prompt.system).toMatch(/final judge/);
    expect(prompt.user).toContain(base.instruction);
    expect(prompt.user).toContain('「認証」, 「バリデーション」');
    expect(prompt.user).toContain('1 file changed, 12 insertions(+)');
    expect(prompt.user).toContain('Result branch `orq/s1/result` at 0123456789ab');
    expect(prompt.user).toContain('- test (block): FAILED\n2 tests failed');
    expect(prompt.user).toContain('- lint (warn): passed');
    expect(prompt.user).not.toContain('Implement the login API');
  });
});

describe('planner prompt (seeds 000 and 002)', () => {
  it('lists the required terms to keep verbatim', () => {
    const prompt = plannerPrompt(
      { ...base, attempt: 0, requiredTerms: ['認証', 'バリデーション'], config },
      format,
    );
    expect(prompt.user).toContain(base.instruction);
    expect(prompt.user).toContain('「認証」, 「バリデーション」');
    expect(prompt.system).toMatch(/verbatim/);
    expect(prompt.user).not.toContain('Previous plan');
  });

  it('tells the planner and the replanner which executors a task may name, if any', () => {
    const plan = (execution: typeof config.execution) =>
      plannerPrompt(
        { ...base, attempt: 0, requiredTerms: [], config: { ...config, execution } },
        format,
      ).system;
    const none =
      '- `executor`: leave it out; orq runs every task on the executor its operator chose.';
    expect(plan(config.execution)).toContain(none);
    // The default executor is no choice of its own.
    expect(plan({ ...config.execution, taskExecutors: ['llm'] })).toContain(none);
    expect(plan({ ...config.execution, taskExecutors: ['agent', 'gpu-box'] })).toContain(
      '- `executor`: leave it out unless a task needs one of `agent` (a model that works ' +
        'through tools (files, commands) step by step), `gpu-box`; orq ignores any other name.',
    );
    const replan = (executors?: typeof config.execution) =>
      replannerPrompt(
        {
          ...base,
          task: task(),
          iteration: 1,
          requiredTerms: [],
          judgement: replanVerdict,
          ...(executors ? { executors } : {}),
        },
        format,
      ).system;
    expect(replan()).toContain(none);
    expect(replan({ ...config.execution, taskExecutors: ['command'] })).toContain(
      "one of `command` (a coding-agent CLI run in a git worktree of the project's repository)",
    );
  });

  it('a replan carries the previous plan and the judge issues and suggestions as feedback', () => {
    const prompt = plannerPrompt(
      {
        ...base,
        attempt: 2,
        requiredTerms: ['認証'],
        config,
        previousPlan: { summary: 'old plan', tasks: [task()] },
        feedback: {
          issues: ['t2 has no error handling'],
          suggestions: ['split validation from login'],
        },
      },
      format,
    );
    expect(prompt.user).toContain('revision 2');
    expect(prompt.user).toContain('"summary": "old plan"');
    expect(prompt.user).toContain('- t2 has no error handling');
    expect(prompt.user).toContain('- split validation from login');
    expect(prompt.user).toContain('「認証」');
  });
});

describe('task judge prompt (seed 001)', () => {
  it('explains when to continue, when to replan and when to block', () => {
    const prompt = taskJudgePrompt(
      {
        ...base,
        task: task(),
        attempt: 2,
        result: {
          output: 'half of the API',
          log: 'ran out of time',
          artifacts: [],
          tokenUsage: { inputTokens: 0, outputTokens: 0 },
          durationMs: 0,
        },
      },
      format,
    );
    expect(prompt.system).toContain('shouldContinue: true');
    expect(prompt.system).toContain('shouldReplan: true');
    for (const criterion of [
      'too large to finish in a single iteration',
      'contradict each other or are unclear',
      'fundamentally wrong',
      'prerequisites are missing',
      'cannot be completed in its current design',
    ]) {
      expect(prompt.system).toContain(criterion);
    }
    expect(prompt.user).toContain('half of the API');
    expect(prompt.user).toContain('ran out of time');
    expect(prompt.user).toContain(task().acceptance);
  });
});

describe('replanner prompt (seed 001)', () => {
  it('holds the original task, the worker log, the judge verdict and the split policy', () => {
    const original = task({ replanningInfo: { iteration: 1, maxIterations: 3 } });
    const prompt = replannerPrompt(
      {
        ...base,
        task: original,
        iteration: 2,
        requiredTerms: ['認証'],
        result: {
          output: 'partial',
          log: 'tried bcrypt; the user table from t1 has no password column',
          artifacts: [],
          tokenUsage: { inputTokens: 0, outputTokens: 0 },
          durationMs: 0,
        },
        judgement: {
          success: false,
          shouldContinue: false,
          shouldReplan: true,
          reason: 'the task needs a schema migration first',
          missingRequirements: ['401 for invalid credentials', 'token expiry'],
        },
      },
      format,
    );
    expect(prompt.user).toContain(original.acceptance);
    expect(prompt.user).toContain(original.context);
    expect(prompt.user).toContain('`src/auth/login.ts`, `src/auth/jwt.ts`');
    expect(prompt.user).toContain('the user table from t1 has no password column');
    expect(prompt.user).toContain('the task needs a schema migration first');
    expect(prompt.user).toContain('- 401 for invalid credentials\n- token expiry');
    expect(prompt.user).toContain('replan 2 of at most 3');
    expect(prompt.user).toContain('「認証」');
    expect(prompt.system).toContain('3 to 5 tasks');
    expect(prompt.system).toContain('Dependencies only among the new tasks');
    expect(prompt.system).toMatch(/smaller than the original/);
  });

  it('keeps the end of a long worker log', () => {
    const log = `${'x'.repeat(20_000)}THE LAST LINE`;
    const prompt = replannerPrompt(
      {
        ...base,
        task: task(),
        iteration: 1,
        requiredTerms: [],
        result: {
          output: '',
          log,
          artifacts: [],
          tokenUsage: { inputTokens: 0, outputTokens: 0 },
          durationMs: 0,
        },
        judgement: {
          success: false,
          shouldContinue: false,
          shouldReplan: true,
          reason: 'r',
          missingRequirements: [],
        },
      },
      format,
    );
    expect(prompt.user).toContain('THE LAST LINE');
    expect(prompt.user).toContain('earlier characters left out');
    expect(prompt.user.length).toBeLessThan(12_000);
  });
});

describe('executor prompt', () => {
  it('holds the task, the results of its dependencies and the judge feedback', () => {
    const prompt = executorPrompt(
      {
        ...base,
        task: task(),
        attempt: 2,
        dependencyResults: [{ taskId: 't1', title: 'User table', output: 'CREATE TABLE users' }],
        feedback: 'Return 401, not 500, for a wrong password',
      },
      format,
    );
    expect(prompt.user).toContain('execution 2');
    expect(prompt.user).toContain(task().acceptance);
    expect(prompt.user).toContain('`t1`: User table');
    expect(prompt.user).toContain('CREATE TABLE users');
    expect(prompt.user).toContain('Return 401, not 500, for a wrong password');
  });
});
