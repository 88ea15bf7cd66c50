import { mkdtemp, readdir, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { beforeAll, describe, expect, it } from 'vitest';
import { SessionConfig } from '../../src/shared/config/schema.js';
import { PlanBreakdown } from '../../src/shared/domain/plan.js';
import { Task, TaskJudgement, TaskResult } from '../../src/shared/domain/task.js';
import { createBuiltinModels } from '../../src/workers/llm/builtin.js';
import {
  ScenarioError,
  loadScenarioFile,
  parseScenario,
  type ScenarioInput,
} from '../../src/shared/config/scenario.js';
import type { CallContext, PlanRequest, RoleModels } from '../../src/workers/llm/types.js';

const examplesDir = fileURLToPath(new URL('../../examples/scenarios/', import.meta.url));
const config = SessionConfig.parse({});

const planA = PlanBreakdown.parse({
  summary: 'A',
  tasks: [{ id: 'a1', title: 'Plan A', acceptance: 'A works' }],
});
const planB = { summary: 'B', tasks: [{ id: 'b1', title: 'Plan B', acceptance: 'B works' }] };

/** A call context carrying the queue job's attempt, as the consumers will pass it. */
function asJobAttempt<T extends CallContext>(request: T, jobAttempt: number): T {
  return { ...request, jobAttempt };
}

function planRequest(attempt: number): PlanRequest {
  return { sessionId: 's1', instruction: 'Build it', attempt, requiredTerms: [], config };
}

const task = (id: string) => Task.parse({ id, title: `Task ${id}`, acceptance: 'It works' });

function execute(models: RoleModels, id: string, attempt: number, jobAttempt = 0) {
  const request = {
    sessionId: 's1',
    task: task(id),
    attempt,
    instruction: 'Build it',
    dependencyResults: [],
  };
  return models.execute(asJobAttempt(request, jobAttempt));
}

function judgeTask(models: RoleModels, id: string, attempt: number) {
  return models.judgeTask({
    sessionId: 's1',
    task: task(id),
    attempt,
    instruction: 'Build it',
    result: TaskResult.parse({ output: 'Done' }),
  });
}

function replan(models: RoleModels, id: string) {
  return models.replan({
    sessionId: 's1',
    task: task(id),
    iteration: 1,
    instruction: 'Build it',
    requiredTerms: [],
    judgement: TaskJudgement.parse({ success: false, shouldReplan: true }),
  });
}

function caught(fn: () => unknown): unknown {
  try {
    fn();
  } catch (error) {
    return error;
  }
  throw new Error('expected a throw');
}

const models = (scenario: ScenarioInput) => createBuiltinModels({ scenario });

describe('scripted replies', () => {
  it('returns scripted plans by attempt and reuses the last one past the end', async () => {
    const m = models({ plans: [planA, planB] });
    const titles = [];
    for (const attempt of [0, 1, 2, 5]) {
      titles.push((await m.plan(planRequest(attempt))).value.tasks[0]?.title);
    }
    expect(titles).toEqual(['Plan A', 'Plan B', 'Plan B', 'Plan B']);
  });

  it('returns scripted plan judgements by attempt, keeping a missing score missing', async () => {
    const m = models({
      planJudgements: [
        { score: 55, isAcceptable: false, issues: ['thin'] },
        { isAcceptable: false },
      ],
    });
    const judge = (attempt: number) =>
      m.judgePlan({ sessionId: 's1', instruction: 'x', attempt, plan: planA, requiredTerms: [] });
    expect((await judge(0)).value).toEqual({
      score: 55,
      isAcceptable: false,
      issues: ['thin'],
      suggestions: [],
    });
    const unavailable = (await judge(3)).value;
    expect(unavailable.score).toBeUndefined();
    expect(unavailable.isAcceptable).toBe(false);
  });

  it('continues once, then succeeds, by execution attempt', async () => {
    const m = models({
      tasks: { t1: { judgements: [{ success: false, shouldContinue: true }, { success: true }] } },
    });
    const verdicts = [];
    for (const attempt of [1, 2, 3]) verdicts.push((await judgeTask(m, 't1', attempt)).value);
    expect(verdicts.map((v) => [v.success, v.shouldContinue])).toEqual([
      [false, true],
      [true, false],
      [true, false],
    ]);
  });

  it('merges a scripted partial result over the default execution', async () => {
    const m = models({ tasks: { t1: { results: [{ output: 'half' }, { log: 'second run' }] } } });
    const first = await execute(m, 't1', 1);
    expect(first.output).toBe('half');
    expect(first.log).toContain('builtin worker');
    expect(first.tokenUsage.outputTokens).toBe(1);
    const second = await execute(m, 't1', 2);
    expect(second).toMatchObject({ output: 'Done: Task t1', log: 'second run' });
  });

  it('returns a result that reports an error when the entry also gives an output', async () => {
    const m = models({ tasks: { t1: { results: [{ output: '', error: 'denied' }] } } });
    const result = await execute(m, 't1', 1);
    expect(result).toMatchObject({ output: '', error: 'denied' });
  });

  it('returns the scripted replan of a task and the default split for others', async () => {
    const m = models({
      tasks: {
        t1: { replan: { reason: 'split', tasks: [{ id: 'x1', title: 'X', acceptance: 'ok' }] } },
      },
    });
    expect((await replan(m, 't1')).value.tasks.map((t) => t.id)).toEqual(['x1']);
    expect((await replan(m, 't2')).value.tasks.map((t) => t.id)).toEqual(['t2-a', 't2-b']);
  });

  it('falls back to the default rules for tasks the scenario does not name', async () => {
    const m = models({ tasks: { t1: { judgements: [{ success: false }] } } });
    expect((await execute(m, 't9', 1)).output).toBe('Done: Task t9');
    expect((await judgeTask(m, 't9', 1)).value.success).toBe(true);
  });

  it('hands out copies, so editing a reply does not change the next one', async () => {
    const m = models({ plans: [planA] });
    const first = await m.plan(planRequest(0));
    first.value.tasks[0]!.title = 'edited';
    expect((await m.plan(planRequest(0))).value.tasks[0]?.title).toBe('Plan A');
  });
});

describe('scripted errors', () => {
  const m = models({
    plans: [{ error: 'planner down' }, planA],
    planJudgements: [{ error: 'judge down' }],
    tasks: {
      t1: {
        results: [{ error: 'worker crashed' }, {}],
        judgements: [{ error: 'judge crashed' }],
        replan: { error: 'replanner crashed' },
      },
    },
  });
  const failed = (message: string) => ({
    code: 'LLM_CALL_FAILED',
    message: expect.stringContaining(message),
  });

  it('makes a plan call throw for an { error } entry', async () => {
    await expect(m.plan(planRequest(0))).rejects.toMatchObject(failed('planner down'));
    expect((await m.plan(planRequest(1))).value.summary).toBe('A');
  });

  it('makes judge, worker and replanner calls throw for { error } entries', async () => {
    const judgePlan = m.judgePlan({
      sessionId: 's1',
      instruction: 'x',
      attempt: 0,
      plan: planA,
      requiredTerms: [],
    });
    await expect(judgePlan).rejects.toMatchObject(failed('judge down'));
    await expect(execute(m, 't1', 1)).rejects.toMatchObject(failed('worker crashed'));
    expect((await execute(m, 't1', 2)).output).toBe('Done: Task t1');
    await expect(judgeTask(m, 't1', 1)).rejects.toMatchObject(failed('judge crashed'));
    await expect(replan(m, 't1')).rejects.toMatchObject(failed('replanner crashed'));
  });
});

describe('scripted transient failures', () => {
  it('fails a call while the job attempt is below times, then succeeds', async () => {
    const m = models({ failures: [{ role: 'planner', times: 2 }] });
    const outcomes = [];
    for (const jobAttempt of [0, 1, 2, 3]) {
      const call = m.plan(asJobAttempt(planRequest(0), jobAttempt));
      outcomes.push(
        await call.then(
          () => 'ok',
          (e: { details: unknown }) => e.details,
        ),
      );
    }
    expect(outcomes).toEqual([
      expect.objectContaining({ role: 'planner', transient: true, jobAttempt: 0 }),
      expect.objectContaining({ transient: true, jobAttempt: 1 }),
      'ok',
      'ok',
    ]);
  });

  it('fails the same way in every process: the job attempt decides, not a counter', async () => {
    const scenario: ScenarioInput = { failures: [{ role: 'worker', times: 1 }] };
    const [podA, podB] = [models(scenario), models(scenario)];
    await expect(execute(podA, 't1', 1, 0)).rejects.toMatchObject({ code: 'LLM_CALL_FAILED' });
    await expect(execute(podA, 't1', 1, 0)).rejects.toMatchObject({ code: 'LLM_CALL_FAILED' });
    await expect(execute(podB, 't1', 1, 0)).rejects.toMatchObject({ code: 'LLM_CALL_FAILED' });
    await expect(execute(podB, 't1', 1, 1)).resolves.toMatchObject({ output: 'Done: Task t1' });
    await expect(execute(podA, 't1', 1, 1)).resolves.toMatchObject({ output: 'Done: Task t1' });
  });

  it('fails only the calls matching role, taskId and attempt', async () => {
    const m = models({ failures: [{ role: 'worker', times: 1, taskId: 't1', attempt: 2 }] });
    await expect(execute(m, 't1', 1)).resolves.toBeDefined();
    await expect(execute(m, 't2', 2)).resolves.toBeDefined();
    await expect(judgeTask(m, 't1', 2)).resolves.toBeDefined();
    await expect(execute(m, 't1', 2)).rejects.toMatchObject({ code: 'LLM_CALL_FAILED' });
  });
});

describe('scenario files', () => {
  let dir: string;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'orq-scenario-'));
  });
  const write = async (name: string, text: string) => {
    const path = join(dir, name);
    await writeFile(path, text);
    return path;
  };

  it('loads every example in examples/scenarios', async () => {
    const files = (await readdir(examplesDir)).filter((f) => /\.(ya?ml|json)$/.test(f));
    expect(files.length).toBeGreaterThanOrEqual(5);
    for (const file of files) {
      const scenario = loadScenarioFile(join(examplesDir, file));
      expect(scenario.description, file).toBeTruthy();
    }
  });

  it('replays seed 003 from noisy-judge.yaml: 55, then 57 for the replan', async () => {
    const m = createBuiltinModels({
      scenario: loadScenarioFile(join(examplesDir, 'noisy-judge.yaml')),
    });
    const scores = [];
    for (const attempt of [0, 1]) {
      const { value: plan } = await m.plan(planRequest(attempt));
      const judge = { sessionId: 's1', instruction: 'x', attempt, plan, requiredTerms: [] };
      scores.push((await m.judgePlan(judge)).value);
    }
    expect(scores.map((s) => [s.score, s.isAcceptable])).toEqual([
      [55, false],
      [57, false],
    ]);
  });

  it('loads a JSON scenario', async () => {
    const path = await write('s.json', JSON.stringify({ plans: [planA] }));
    expect(loadScenarioFile(path).plans).toHaveLength(1);
  });

  it('rejects a malformed field, naming the file, the field and its line', async () => {
    const path = await write(
      'bad.yaml',
      ['tasks:', '  t1:', '    judgements:', '      - success: yes please', ''].join('\n'),
    );
    const error = caught(() => loadScenarioFile(path));
    expect(error).toBeInstanceOf(ScenarioError);
    expect(error).toMatchObject({ code: 'SCENARIO_INVALID' });
    const { message, issues } = error as ScenarioError;
    expect(message).toContain(path);
    expect(issues[0]?.path).toBe('tasks.t1.judgements.0.success');
    expect(issues[0]?.message).toContain('line 4');
  });

  it('names the deepest field of a malformed plan, not just the list entry', async () => {
    const path = await write('plan.yaml', 'plans:\n  - tasks:\n      - id: t1\n        title: X\n');
    const error = caught(() => loadScenarioFile(path)) as ScenarioError;
    expect(error.issues.map((i) => i.path)).toEqual(['plans.0.tasks.0.acceptance']);
  });

  it('rejects a misspelt key by name', async () => {
    const path = await write(
      'typo.yaml',
      'planJudgement:\n  - score: 50\n    isAcceptable: false\n',
    );
    expect(() => loadScenarioFile(path)).toThrow(/planJudgement/);
  });

  it('rejects text that is not YAML, naming the file', async () => {
    const path = await write('broken.yaml', 'plans: [\n');
    expect(caught(() => loadScenarioFile(path))).toMatchObject({
      code: 'SCENARIO_INVALID',
      message: expect.stringContaining(path),
    });
  });

  it('rejects a missing file with the path', async () => {
    const path = join(dir, 'missing.yaml');
    expect(caught(() => loadScenarioFile(path))).toMatchObject({
      code: 'SCENARIO_INVALID',
      message: expect.stringContaining(path),
    });
  });

  it('validates a scenario given as data', () => {
    expect(() => parseScenario({ failures: [{ role: 'coordinator', times: 1 }] })).toThrow(
      /failures\.0\.role/,
    );
    expect(() => createBuiltinModels({ scenario: { latencyMs: -1 } as ScenarioInput })).toThrow(
      ScenarioError,
    );
  });
});
