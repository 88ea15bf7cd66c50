import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { SessionConfig } from '../../src/shared/config/schema.js';
import { PlanBreakdown, type PlannedTask } from '../../src/shared/domain/plan.js';
import { Task, TaskJudgement, TaskResult } from '../../src/shared/domain/task.js';
import { OrqError } from '../../src/shared/errors.js';
import {
  BUILTIN_MODELS_LABEL,
  createBuiltinModels,
  splitInstructionIntoClauses,
} from '../../src/workers/llm/builtin.js';
import type {
  ExecuteRequest,
  PlanJudgeRequest,
  PlanRequest,
  ReplanRequest,
  TaskJudgeRequest,
} from '../../src/workers/llm/types.js';

const config = SessionConfig.parse({});
const JAPANESE = '認証機能とバリデーションを実装して';

function planRequest(instruction: string, extra: Partial<PlanRequest> = {}): PlanRequest {
  return { sessionId: 's1', instruction, attempt: 0, requiredTerms: [], config, ...extra };
}

function judgePlanRequest(plan: PlanBreakdown, requiredTerms: string[]): PlanJudgeRequest {
  return { sessionId: 's1', instruction: 'x', attempt: 0, plan, requiredTerms };
}

const task = Task.parse({
  id: 't2',
  title: 'Add validation',
  acceptance: 'Every field is validated',
  context: 'Login form',
});

function executeRequest(extra: Partial<ExecuteRequest> = {}): ExecuteRequest {
  return {
    sessionId: 's1',
    task,
    attempt: 1,
    instruction: 'Add a login form and validation',
    dependencyResults: [{ taskId: 't1', title: 'Add a login form', output: 'Done: form\nmore' }],
    ...extra,
  };
}

function judgeTaskRequest(result: Partial<TaskResult>): TaskJudgeRequest {
  return {
    sessionId: 's1',
    task,
    attempt: 1,
    instruction: 'x',
    result: TaskResult.parse({ output: 'Done', ...result }),
  };
}

function replanRequest(): ReplanRequest {
  return {
    sessionId: 's1',
    task,
    iteration: 1,
    instruction: 'x',
    requiredTerms: [],
    judgement: TaskJudgement.parse({ success: false, shouldReplan: true, reason: 'too big' }),
  };
}

/** Dependencies that name no task, and whether following dependencies can loop. */
function checkGraph(tasks: readonly PlannedTask[]): { dangling: string[]; cyclic: boolean } {
  const byId = new Map(tasks.map((t) => [t.id, t]));
  const dangling = tasks.flatMap((t) => t.dependencies.filter((d) => !byId.has(d)));
  const state = new Map<string, 'visiting' | 'done'>();
  const visit = (id: string): boolean => {
    if (state.get(id) === 'done') return false;
    if (state.get(id) === 'visiting') return true;
    state.set(id, 'visiting');
    const loops = (byId.get(id)?.dependencies ?? []).some((d) => byId.has(d) && visit(d));
    state.set(id, 'done');
    return loops;
  };
  return { dangling, cyclic: tasks.some((t) => visit(t.id)) };
}

const texts = (t: PlannedTask) => [t.title, t.acceptance, t.context].join('\n');

describe('builtin provider, default rules', () => {
  const models = createBuiltinModels();

  it('says it is not an LLM', () => {
    expect(models.label).toBe(BUILTIN_MODELS_LABEL);
    expect(models.label).toBe('builtin (deterministic rules, not an LLM)');
  });

  it('gives deep-equal replies to the same request, for every role', async () => {
    const feedback = { issues: ['t1 lacks detail'], suggestions: ['mention tests'] };
    const request = planRequest(JAPANESE, { attempt: 1, feedback, requiredTerms: ['認証'] });
    expect(await models.plan(request)).toEqual(await models.plan(request));
    const plan = (await models.plan(request)).value;
    const judge = judgePlanRequest(plan, ['認証']);
    expect(await models.judgePlan(judge)).toEqual(await models.judgePlan(judge));
    expect(await models.execute(executeRequest())).toEqual(await models.execute(executeRequest()));
    const judged = judgeTaskRequest({});
    expect(await models.judgeTask(judged)).toEqual(await models.judgeTask(judged));
    expect(await models.replan(replanRequest())).toEqual(await models.replan(replanRequest()));
  });

  it('splits the Japanese example into clause tasks plus an integration task', async () => {
    const { value: plan } = await models.plan(planRequest(JAPANESE));
    const clauseTasks = plan.tasks.slice(0, -1);
    const integration = plan.tasks.at(-1);
    expect(clauseTasks.length).toBeGreaterThanOrEqual(2);
    expect(clauseTasks.map((t) => t.title)).toEqual(['認証機能', 'バリデーションを実装して']);
    expect(integration?.title).toBe('Integrate and verify');
    expect(integration?.dependencies).toEqual(clauseTasks.map((t) => t.id));
    for (const term of ['認証', 'バリデーション']) {
      expect(texts(integration as PlannedTask)).toContain(term);
      expect(plan.tasks.some((t) => t.title.includes(term))).toBe(true);
    }
  });

  it('quotes each clause verbatim in its acceptance and the instruction in its context', async () => {
    const instruction = 'Add a login form, validate input';
    const { value: plan } = await models.plan(planRequest(instruction));
    for (const t of plan.tasks.slice(0, -1)) {
      expect(t.acceptance).toContain(t.title);
      expect(t.context).toContain(instruction);
    }
  });

  it('splits English on commas, semicolons, "and", "then" and newlines', () => {
    const clauses = splitInstructionIntoClauses(
      'Add a login form, validate input and write tests; update docs\nthen deploy.',
    );
    expect(clauses.map((c) => c.text)).toEqual([
      'Add a login form',
      'validate input',
      'write tests',
      'update docs',
      'deploy',
    ]);
  });

  it('orders a clause introduced by "then" or そして after the one before it', async () => {
    const { value: plan } = await models.plan(planRequest('Write the code then test it'));
    expect(plan.tasks.map((t) => [t.id, t.dependencies])).toEqual([
      ['t1', []],
      ['t2', ['t1']],
      ['t3', ['t1', 't2']],
    ]);
    const japanese = splitInstructionIntoClauses('コードを書く。そしてテストする');
    expect(japanese.map((c) => c.sequential)).toEqual([false, true]);
  });

  it('does not split words that merely contain と', () => {
    expect(splitInstructionIntoClauses('テストを追加すること').map((c) => c.text)).toEqual([
      'テストを追加すること',
    ]);
  });

  it('folds clauses beyond the eighth into the eighth task', async () => {
    const { value: plan } = await models.plan(
      planRequest('a1, b2, c3, d4, e5, f6, g7, h8, i9, j10'),
    );
    expect(plan.tasks).toHaveLength(9);
    expect(plan.tasks[7]?.title).toBe('h8, i9, j10');
  });

  it('makes a single task without an integration task for a single clause', async () => {
    const { value: plan } = await models.plan(planRequest('Write the README'));
    expect(plan.tasks.map((t) => t.id)).toEqual(['t1']);
    expect(plan.tasks[0]?.dependencies).toEqual([]);
  });

  it('proposes valid, acyclic plans with no dangling dependencies for any instruction', async () => {
    await fc.assert(
      fc.asyncProperty(fc.string({ minLength: 1, maxLength: 200 }), async (instruction) => {
        const { value } = await models.plan(planRequest(instruction));
        const plan = PlanBreakdown.parse(value);
        expect(new Set(plan.tasks.map((t) => t.id)).size).toBe(plan.tasks.length);
        expect(plan.tasks.length).toBeLessThanOrEqual(9);
        expect(checkGraph(plan.tasks)).toEqual({ dangling: [], cyclic: false });
      }),
      { numRuns: 200 },
    );
  });

  it('on a replan keeps the tasks and writes each feedback item into the task it names', async () => {
    const first = (await models.plan(planRequest(JAPANESE))).value;
    const feedback = {
      issues: ['t1 does not say which login methods', 'Required term "JWT" is missing'],
      suggestions: ['バリデーションのエラーメッセージを決める'],
    };
    const { value: revised } = await models.plan(planRequest(JAPANESE, { attempt: 1, feedback }));
    expect(revised.tasks.map((t) => [t.id, t.title, t.dependencies])).toEqual(
      first.tasks.map((t) => [t.id, t.title, t.dependencies]),
    );
    expect(revised.tasks[0]?.context).toContain('t1 does not say which login methods');
    expect(revised.tasks[1]?.context).toContain('バリデーションのエラーメッセージを決める');
    // Matches no task: goes to the last one.
    expect(revised.tasks[2]?.context).toContain('Required term "JWT" is missing');
  });

  it('scores a plan 100 when every required term appears in its tasks, case-insensitively', async () => {
    const { value: plan } = await models.plan(planRequest('Add OAuth login, validate input'));
    const { value } = await models.judgePlan(judgePlanRequest(plan, ['oauth', 'Validate']));
    expect(value).toEqual({ score: 100, isAcceptable: true, issues: [], suggestions: [] });
  });

  it('lowers the score and names the term when a required term is missing', async () => {
    const { value: plan } = await models.plan(planRequest(JAPANESE));
    const all = (await models.judgePlan(judgePlanRequest(plan, ['認証', 'バリデーション']))).value;
    const some = (await models.judgePlan(judgePlanRequest(plan, ['認証', 'データベース']))).value;
    const none = (await models.judgePlan(judgePlanRequest(plan, ['JWT', 'データベース']))).value;
    expect(all.score).toBe(100);
    expect(some).toMatchObject({ score: 75, isAcceptable: true });
    expect(some.issues.join('\n')).toContain('データベース');
    expect(none).toMatchObject({ score: 50, isAcceptable: false });
  });

  it('takes 10 points off a plan with a task without context', async () => {
    const plan = PlanBreakdown.parse({
      tasks: [{ id: 't1', title: 'Add login', acceptance: 'Login works' }],
    });
    const { value } = await models.judgePlan(judgePlanRequest(plan, ['login']));
    expect(value.score).toBe(90);
    expect(value.issues).toEqual(['Tasks without context: t1']);
  });

  it('executes a task into "Done: <title>" plus a line per dependency result', async () => {
    const result = await models.execute(executeRequest({ feedback: 'cover the email field' }));
    expect(result.output).toBe('Done: Add validation\nUsed t1 (Add a login form): Done: form');
    expect(result.error).toBeUndefined();
    expect(result.log).toContain('read 1 dependency result(s): t1');
    expect(result.log).toContain('applied feedback: cover the email field');
    expect(result.tokenUsage.outputTokens).toBe(Math.ceil(result.output.length / 4));
    expect(result.tokenUsage.inputTokens).toBeGreaterThan(0);
  });

  it('throws an AbortError when the signal is already aborted', async () => {
    const controller = new AbortController();
    controller.abort();
    const call = models.execute(executeRequest({ signal: controller.signal }));
    await expect(call).rejects.toBeInstanceOf(OrqError);
    await expect(call).rejects.toMatchObject({ name: 'AbortError', code: 'LLM_CALL_FAILED' });
  });

  it('aborts a call while it waits out its latency', async () => {
    const slow = createBuiltinModels({ latencyMs: 10_000 });
    const controller = new AbortController();
    const started = Date.now();
    const call = slow.execute(executeRequest({ signal: controller.signal }));
    setTimeout(() => controller.abort(), 20);
    await expect(call).rejects.toMatchObject({ name: 'AbortError' });
    expect(Date.now() - started).toBeLessThan(5_000);
  });

  it('waits latencyMs before replying', async () => {
    const slow = createBuiltinModels({ latencyMs: 40 });
    const started = performance.now();
    await slow.judgeTask(judgeTaskRequest({}));
    expect(performance.now() - started).toBeGreaterThanOrEqual(35);
  });

  it('judges a task done when it has output and no error', async () => {
    const { value } = await models.judgeTask(judgeTaskRequest({ output: 'Done: x' }));
    expect(value).toMatchObject({ success: true, shouldContinue: false, shouldReplan: false });
  });

  it('judges a task not done when it reports an error or has no output', async () => {
    const failed = (await models.judgeTask(judgeTaskRequest({ error: 'boom' }))).value;
    const empty = (await models.judgeTask(judgeTaskRequest({ output: '  ' }))).value;
    expect(failed).toMatchObject({ success: false, reason: expect.stringContaining('boom') });
    expect(empty).toMatchObject({ success: false, reason: expect.stringContaining('no output') });
  });

  it('replans a task into a preparation subtask and the task itself', async () => {
    const { value } = await models.replan(replanRequest());
    expect(value.tasks.map((t) => [t.id, t.title, t.dependencies])).toEqual([
      ['t2-a', 'Investigate and prepare: Add validation', []],
      ['t2-b', 'Add validation', ['t2-a']],
    ]);
    expect(value.tasks[0]?.acceptance).toContain('Every field is validated');
    expect(value.tasks[1]?.acceptance).toBe('Every field is validated');
    expect(value.reason).toContain('too big');
  });
});
