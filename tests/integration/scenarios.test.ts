import { afterAll, describe, expect, it } from 'vitest';
import type { OrqConfigInput } from '../../src/shared/config/schema.js';
import type { Task } from '../../src/shared/domain/task.js';
import type { ScenarioInput } from '../../src/shared/config/scenario.js';
import type { RoleModels } from '../../src/workers/llm/types.js';
import { jobIds } from '../../src/shared/queues.js';
import { clusterPerTest, type TestCluster } from '../support/cluster.js';
import {
  decisions,
  deferred,
  eventually,
  exampleScenario,
  executionsOf,
  historyOf,
  recordingModels,
  scenarioDir,
  taskMoved,
} from '../support/scenarios.js';

let cluster: TestCluster | undefined;
const startCluster = clusterPerTest();
const scenarios = scenarioDir();
afterAll(() => scenarios.cleanup());

const TIMEOUT = 15_000;

async function run(
  scenario: string,
  options: {
    instruction?: string;
    config?: Record<string, unknown>;
    clusterConfig?: OrqConfigInput;
    models?: RoleModels;
  } = {},
) {
  cluster = await startCluster({
    ...(options.clusterConfig ? { config: options.clusterConfig } : {}),
    ...(options.models ? { models: options.models } : {}),
  });
  const session = await cluster.client.submit({
    instruction: options.instruction ?? 'Run the scripted plan',
    config: { ...options.config, llm: { scenario } },
  });
  return { client: cluster.client, id: session.id };
}

const task = (view: { tasks: Task[] }, id: string): Task => {
  const found = view.tasks.find((t) => t.id === id);
  if (!found) throw new Error(`no task ${id}`);
  return found;
};

describe('dependency order', () => {
  it('runs a diamond A -> B, C -> D in dependency order and completes', async () => {
    const { client, id } = await run(exampleScenario('diamond.yaml'));
    const view = await client.wait(id, { timeoutMs: TIMEOUT });
    expect(view.session.state).toBe('COMPLETED');
    expect(view.tasks.map((t) => [t.id, t.state, t.attempts])).toEqual([
      ['A', 'DONE', 1],
      ['B', 'DONE', 1],
      ['C', 'DONE', 1],
      ['D', 'DONE', 1],
    ]);
    expect(view.counters).toEqual({ open: 0, active: 0 });

    const h = await historyOf(client, id);
    const done = (t: string) => taskMoved(h, t, 'DONE');
    const started = (t: string) => taskMoved(h, t, 'RUNNING');
    for (const t of ['A', 'B', 'C', 'D']) {
      expect(done(t), `${t} done`).toBeGreaterThan(-1);
      expect(executionsOf(h, t)).toHaveLength(1);
    }
    expect(started('B')).toBeGreaterThan(done('A'));
    expect(started('C')).toBeGreaterThan(done('A'));
    expect(started('D')).toBeGreaterThan(done('B'));
    expect(started('D')).toBeGreaterThan(done('C'));
    const executed = (t: string) => h.findIndex((e) => e.type === 'execution' && e.taskId === t);
    expect(executed('D')).toBeGreaterThan(Math.max(executed('B'), executed('C')));
    // D's worker was handed the results of both of its dependencies.
    expect(task(view, 'D').result?.output).toMatch(/Used B .*\n?.*Used C|Used C .*\n?.*Used B/s);
  });
});

describe('task replan (seed 001)', () => {
  const replanScenario: ScenarioInput = {
    plans: [
      {
        summary: 'Login with validation',
        tasks: [
          { id: 't1', title: 'Build the login form', acceptance: 'The form posts', context: 'c' },
          {
            id: 't2',
            title: 'Validate the login input',
            acceptance: 'Bad input is rejected',
            context: 'c',
            dependencies: ['t1'],
          },
          {
            id: 't3',
            title: 'Integrate and verify',
            acceptance: 'Login works end to end',
            context: 'c',
            dependencies: ['t1', 't2'],
          },
        ],
      },
    ],
    planJudgements: [{ score: 90, isAcceptable: true }],
    tasks: {
      t2: {
        judgements: [
          { success: false, shouldReplan: true, reason: 'The rules were never defined' },
        ],
        replan: {
          reason: 'Define the rules first, then implement them',
          tasks: [
            { id: 'a', title: 'Define the rules', acceptance: 'Rules written', context: 'c' },
            {
              id: 'b',
              title: 'Implement the rules',
              acceptance: 'Bad input is rejected',
              context: 'c',
              dependencies: ['a'],
            },
          ],
        },
      },
    },
  };

  it('blocks the task when its subtasks would pass budget.maxTasks, saying why', async () => {
    const { client, id } = await run(scenarios.write('replan-capped', replanScenario), {
      config: { budget: { maxTasks: 4 } },
    });
    const view = await client.wait(id, { timeoutMs: TIMEOUT, until: 'settled' });
    expect(view.session.state).toBe('BLOCKED');
    expect(view.tasks.map((t) => [t.id, t.state])).toEqual([
      ['t1', 'DONE'],
      ['t2', 'BLOCKED'],
      ['t3', 'READY'],
    ]);
    const reason =
      "the Replanner's subtasks for t2 are unusable: 2 subtasks would bring the session to 5 tasks, more than budget.maxTasks allows (4)";
    expect(task(view, 't2').blockedReason).toBe(reason);
    expect(decisions(await historyOf(client, id), 'replan:invalid')[0]).toMatchObject({
      taskId: 't2',
      reason,
      inputs: { maxTasks: 4 },
    });
  });

  it('replaces the task by its subtasks and rewires its dependent to run after them', async () => {
    const { client, id } = await run(scenarios.write('replan', replanScenario));
    const view = await client.wait(id, { timeoutMs: TIMEOUT });
    expect(view.session.state).toBe('COMPLETED');
    expect(view.counters).toEqual({ open: 0, active: 0 });

    const t2 = task(view, 't2');
    expect(t2.state).toBe('REPLACED_BY_REPLAN');
    const replacedBy = t2.replanningInfo?.replacedBy ?? [];
    expect(replacedBy).toHaveLength(2);
    const [subA, subB] = replacedBy as [string, string];
    for (const sub of replacedBy) {
      const s = task(view, sub);
      expect(s.state).toBe('DONE');
      expect(s.replanningInfo).toMatchObject({ iteration: 1, originalTaskId: 't2' });
    }
    // The subtasks keep the original's dependency on t1 and their own order.
    expect(task(view, subA).dependencies).toEqual(['t1']);
    expect(task(view, subB).dependencies).toEqual(expect.arrayContaining(['t1', subA]));

    const t3 = task(view, 't3');
    expect(t3.state).toBe('DONE');
    expect(t3.dependencies).not.toContain('t2');
    expect(t3.dependencies).toEqual(expect.arrayContaining(['t1', subB]));

    const h = await historyOf(client, id);
    expect(decisions(h, 'replan:applied')).toHaveLength(1);
    expect(decisions(h, 'task:replan')).toHaveLength(1);
    expect(taskMoved(h, 't2', 'REPLACED_BY_REPLAN')).toBeGreaterThan(-1);
    expect(taskMoved(h, subB, 'RUNNING')).toBeGreaterThan(taskMoved(h, subA, 'DONE'));
    expect(taskMoved(h, 't3', 'RUNNING')).toBeGreaterThan(taskMoved(h, subB, 'DONE'));
    expect(executionsOf(h, 't3')).toHaveLength(1);
  });

  it('replans a subtask again along the chain and blocks at the limit of the chain', async () => {
    const chain: ScenarioInput = {
      ...replanScenario,
      tasks: {
        ...replanScenario.tasks,
        // The second subtask of t2 is replanned again (iteration 2 of 3)...
        't2.r1.2': {
          judgements: [{ success: false, shouldReplan: true, reason: 'Still too big' }],
          replan: {
            tasks: [
              { id: 'x', title: 'Rules for the name', acceptance: 'Name checked', context: 'c' },
              { id: 'y', title: 'Rules for the password', acceptance: 'Pw checked', context: 'c' },
            ],
          },
        },
        // ...and one of its subtasks asks for a third replan, which the limit refuses.
        't2.r1.2.r2.1': {
          judgements: [{ success: false, shouldReplan: true, reason: 'Cannot be split further' }],
        },
      },
    };
    const { client, id } = await run(scenarios.write('replan-chain', chain));
    const view = await client.wait(id, { timeoutMs: TIMEOUT });
    expect(view.session.state).toBe('BLOCKED');
    const states = Object.fromEntries(view.tasks.map((t) => [t.id, t.state]));
    expect(states).toEqual({
      t1: 'DONE',
      t2: 'REPLACED_BY_REPLAN',
      't2.r1.1': 'DONE',
      't2.r1.2': 'REPLACED_BY_REPLAN',
      't2.r1.2.r2.1': 'BLOCKED',
      't2.r1.2.r2.2': 'DONE',
      t3: 'READY',
    });
    expect(task(view, 't2.r1.2.r2.1').replanningInfo).toMatchObject({
      iteration: 2,
      maxIterations: 3,
      originalTaskId: 't2',
    });
    // t3 now waits for the sinks of the last replacement, and only for the blocked one.
    expect(task(view, 't3')).toMatchObject({ pendingDependencies: 1 });
    expect([...task(view, 't3').dependencies].sort()).toEqual(
      ['t1', 't2.r1.2.r2.1', 't2.r1.2.r2.2'].sort(),
    );
    const h = await historyOf(client, id);
    expect(decisions(h, 'replan:applied')).toHaveLength(2);
    expect(decisions(h, 'task:blocked')[0]?.inputs).toMatchObject({
      cause: 'max_replan_iterations',
      replanIteration: 2,
      maxIterations: 3,
    });

    await client.resume(id, { mode: 'skip' });
    const done = await client.wait(id, { timeoutMs: TIMEOUT, until: 'finished' });
    expect(done.session.state).toBe('COMPLETED');
    expect(task(done, 't3')).toMatchObject({ state: 'DONE', attempts: 1 });
    expect(done.counters).toEqual({ open: 0, active: 0 });
  });

  it('blocks the task instead when no replan iteration is left (maxIterations 1)', async () => {
    const { client, id } = await run(scenarios.write('replan-exhausted', replanScenario), {
      config: { replanning: { maxIterations: 1 } },
    });
    const view = await client.wait(id, { timeoutMs: TIMEOUT });
    expect(view.session.state).toBe('BLOCKED');
    expect(task(view, 't2').state).toBe('BLOCKED');
    expect(task(view, 't2').replanningInfo?.replacedBy).toBeUndefined();
    expect(task(view, 't3').state).toBe('READY');
    expect(view.tasks).toHaveLength(3);

    const h = await historyOf(client, id);
    const [blocked] = decisions(h, 'task:blocked');
    expect(blocked?.taskId).toBe('t2');
    expect(blocked?.inputs).toMatchObject({ cause: 'max_replan_iterations', maxIterations: 1 });
    expect(decisions(h, 'replan:applied')).toHaveLength(0);
  });
});

describe('plan refinement (seeds 000 and 003)', () => {
  const instruction = 'Build a signup form and validate the input';

  it('rejects a replan that moves the score only within the noise (55 -> 57)', async () => {
    const { client, id } = await run(exampleScenario('noisy-judge.yaml'), { instruction });
    const view = await client.wait(id, { timeoutMs: TIMEOUT });
    expect(view.session.state).toBe('FAILED');
    expect(view.session.failure?.code).toBe('PLAN_REJECTED');
    expect(view.tasks).toHaveLength(0);

    const h = await historyOf(client, id);
    const [replan] = decisions(h, 'refinement:replan');
    expect(replan?.inputs).toMatchObject({ reasonCode: 'quality_below_threshold', score: 55 });
    const [reject] = decisions(h, 'refinement:reject');
    expect(reject?.inputs).toMatchObject({
      reasonCode: 'stagnation_noise',
      score: 57,
      previousScore: 55,
      scoreDirection: 'stable',
      isAcceptable: false,
    });
    expect(view.session.failure?.reason).toBe(reject?.reason);
    expect(view.session.planning.refinementHistory.map((r) => r.decision)).toEqual([
      'replan',
      'reject',
    ]);
  });

  it('accepts a replan that improves enough (55 -> 80, acceptable)', async () => {
    const path = scenarios.write('improves', {
      planJudgements: [
        { score: 55, isAcceptable: false, issues: ['Input validation is missing'] },
        { score: 80, isAcceptable: true },
      ],
    });
    const { client, id } = await run(path, { instruction });
    const view = await client.wait(id, { timeoutMs: TIMEOUT });
    expect(view.session.state).toBe('COMPLETED');
    expect(view.tasks.length).toBeGreaterThan(0);
    const h = await historyOf(client, id);
    const [accept] = decisions(h, 'refinement:accept');
    expect(accept?.inputs).toMatchObject({
      reasonCode: 'quality_ok',
      score: 80,
      previousScore: 55,
      scoreDirection: 'improved',
    });
    // The second plan was made with the judge's feedback on the first one.
    const plans = h.filter((e) => e.type === 'plan' && e.source === 'planner');
    expect(plans).toHaveLength(2);
    expect(JSON.stringify(plans[1])).toContain('Input validation is missing');
  });

  const twoTasks = [
    { id: 'A', title: 'Build the signup form', acceptance: 'The form posts', context: 'c' },
    { id: 'B', title: 'Validate the input', acceptance: 'Bad input is refused', context: 'c' },
  ];
  const cyclic = [
    { ...twoTasks[0]!, dependencies: ['B'] },
    { ...twoTasks[1]!, dependencies: ['A'] },
  ];

  it('falls back to the previous acceptable plan when a replan breaks the structure', async () => {
    const path = scenarios.write('broken-replan', {
      plans: [{ tasks: twoTasks }, { tasks: cyclic }],
      planJudgements: [
        { score: 75, isAcceptable: true, suggestions: ['Order the tasks'] },
        { score: 90, isAcceptable: true },
      ],
    });
    const { client, id } = await run(path, {
      instruction,
      config: { refinement: { refineSuggestionsOnSuccess: true } },
    });
    const view = await client.wait(id, { timeoutMs: TIMEOUT });
    expect(view.session.state).toBe('COMPLETED');
    expect(view.tasks.map((t) => [t.id, t.dependencies, t.state])).toEqual([
      ['A', [], 'DONE'],
      ['B', [], 'DONE'],
    ]);
    const h = await historyOf(client, id);
    expect(decisions(h, 'refinement:replan')[0]?.inputs).toMatchObject({
      reasonCode: 'apply_suggestions',
    });
    expect(decisions(h, 'structure:invalid')[0]?.reason).toContain('cycle');
    expect(decisions(h, 'refinement:accept-previous')).toHaveLength(1);
  });

  it('runs the acceptable plan when the suggestion replan after it is rejected', async () => {
    const path = scenarios.write('rejected-suggestion-replan', {
      plans: [{ tasks: twoTasks }, { tasks: [twoTasks[0]!] }],
      planJudgements: [
        { score: 75, isAcceptable: true, suggestions: ['Split the form'] },
        { score: 60, isAcceptable: false, issues: ['Validation is gone'] },
      ],
    });
    const { client, id } = await run(path, {
      instruction,
      config: { refinement: { refineSuggestionsOnSuccess: true } },
    });
    const view = await client.wait(id, { timeoutMs: TIMEOUT });
    expect(view.session.state).toBe('COMPLETED');
    expect(view.tasks.map((t) => [t.id, t.state])).toEqual([
      ['A', 'DONE'],
      ['B', 'DONE'],
    ]);
    const h = await historyOf(client, id);
    expect(decisions(h, 'refinement:reject')).toHaveLength(1);
    const [previous, ...more] = decisions(h, 'refinement:accept-previous');
    expect(more).toEqual([]);
    expect(previous?.reason).toMatch(/; the previous plan was acceptable, so it is used$/);
  });

  it('replans from the previous plan when a replan of an unacceptable plan breaks the structure', async () => {
    const ordered = [twoTasks[0]!, { ...twoTasks[1]!, dependencies: ['A'] }];
    const path = scenarios.write('broken-replan-of-unacceptable', {
      plans: [{ tasks: twoTasks }, { tasks: cyclic }, { tasks: ordered }],
      planJudgements: [
        { score: 50, isAcceptable: false, issues: ['Validate only after the form exists'] },
        { score: 90, isAcceptable: true },
        { score: 85, isAcceptable: true },
      ],
    });
    const { models, calls } = recordingModels(path);
    const { client, id } = await run(path, { instruction, models });
    const view = await client.wait(id, { timeoutMs: TIMEOUT });
    expect(view.session.state).toBe('COMPLETED');
    // The third plan ran, not the broken second one.
    expect(view.tasks.map((t) => [t.id, t.dependencies, t.state])).toEqual([
      ['A', [], 'DONE'],
      ['B', ['A'], 'DONE'],
    ]);
    const h = await historyOf(client, id);
    expect(decisions(h, 'structure:invalid')[0]?.reason).toContain('cycle');
    const replans = decisions(h, 'refinement:replan').map((d) => d.inputs);
    expect(replans.map((r) => r.reasonCode)).toEqual([
      'quality_below_threshold',
      'structure_broken',
    ]);
    expect(replans[1]).toMatchObject({ attemptCount: 1, previousScore: 50, score: 90 });
    // The Planner was asked to revise the first plan, told what broke and what the judge wanted.
    const third = calls.plan[2];
    expect(third?.previousPlan?.tasks.map((t) => t.dependencies)).toEqual([[], []]);
    expect(third?.feedback?.issues).toEqual([
      expect.stringMatching(/dependency cycle/i),
      'Validate only after the form exists',
    ]);
    expect(view.session.planning.refinementHistory.map((r) => r.reasonCode)).toEqual([
      'quality_below_threshold',
      'structure_broken',
      // Both attempts are spent (the broken replan took one): the acceptable plan stands.
      'max_attempts_reached',
    ]);
  });

  it('fails with STRUCTURE_BROKEN when a replan breaks the structure and no attempt is left', async () => {
    const path = scenarios.write('broken-replan-last-attempt', {
      plans: [{ tasks: twoTasks }, { tasks: cyclic }],
      planJudgements: [
        { score: 50, isAcceptable: false },
        { score: 90, isAcceptable: true },
      ],
    });
    const { client, id } = await run(path, {
      instruction,
      config: { refinement: { maxRefinementAttempts: 1 } },
    });
    const view = await client.wait(id, { timeoutMs: TIMEOUT });
    expect(view.session.state).toBe('FAILED');
    expect(view.session.failure?.code).toBe('STRUCTURE_BROKEN');
    expect(view.session.failure?.reason).toMatch(/dependency cycle/i);
    expect(view.session.failure?.reason).toContain('1 of maxRefinementAttempts 1');
    expect(view.tasks).toEqual([]);
  });

  it('replans a first plan whose dependencies form a cycle, even if the judge liked it', async () => {
    const path = scenarios.write('cyclic-first', {
      plans: [{ tasks: cyclic }, { tasks: twoTasks }],
      planJudgements: [
        { score: 90, isAcceptable: true },
        { score: 96, isAcceptable: true },
      ],
    });
    const { client, id } = await run(path, { instruction });
    const view = await client.wait(id, { timeoutMs: TIMEOUT });
    expect(view.session.state).toBe('COMPLETED');
    const h = await historyOf(client, id);
    const [replan] = decisions(h, 'refinement:replan');
    expect(replan?.inputs).toMatchObject({ isAcceptable: false });
    expect(JSON.stringify(replan?.inputs.issues)).toContain('dependency cycle');
    // The history says why a plan the judge liked was replanned, before the decision.
    const [invalid] = decisions(h, 'structure:invalid');
    expect(invalid?.reason).toMatch(/^the plan cannot run as given: dependency cycle/);
    expect(invalid?.inputs).toMatchObject({ score: 90, isAcceptable: true });
    expect(h.indexOf(invalid!)).toBeLessThan(h.indexOf(replan!));
    expect(decisions(h, 'refinement:accept')[0]?.inputs).toMatchObject({ score: 96 });
  });

  it('sends a plan with more tasks than budget.maxTasks back to the Planner, saying why', async () => {
    // Six for a cap of two: the plan that fits is a task-count change (6 -> 2) that would break
    // the structure if the oversized plan were the one it is compared with.
    const sixTasks = [...twoTasks, ...['C', 'D', 'E', 'F'].map((id) => ({ ...twoTasks[0]!, id }))];
    const path = scenarios.write('too-many-tasks', {
      plans: [{ tasks: sixTasks }, { tasks: twoTasks }],
      planJudgements: [
        { score: 95, isAcceptable: true },
        { score: 90, isAcceptable: true },
      ],
    });
    const { client, id } = await run(path, { instruction, config: { budget: { maxTasks: 2 } } });
    const view = await client.wait(id, { timeoutMs: TIMEOUT });
    expect(view.session.state).toBe('COMPLETED');
    expect(view.tasks.map((t) => t.id)).toEqual(['A', 'B']);
    const h = await historyOf(client, id);
    const tooMany = 'the plan has 6 tasks, more than budget.maxTasks allows (2)';
    expect(decisions(h, 'structure:invalid')[0]?.reason).toBe(
      `the plan cannot run as given: ${tooMany}`,
    );
    // The Planner is told, in the feedback of the replan.
    expect(decisions(h, 'refinement:replan')[0]?.inputs.issues).toContain(tooMany);
  });

  it('treats a replan with more tasks than budget.maxTasks as a broken structure', async () => {
    const threeTasks = [
      ...twoTasks,
      { id: 'C', title: 'Test the signup', acceptance: 'Tests pass', context: 'c' },
    ];
    const path = scenarios.write('replan-too-many-tasks', {
      plans: [{ tasks: twoTasks }, { tasks: threeTasks }],
      planJudgements: [
        { score: 50, isAcceptable: false },
        { score: 90, isAcceptable: true },
      ],
    });
    const { client, id } = await run(path, {
      instruction,
      config: { budget: { maxTasks: 2 }, refinement: { maxRefinementAttempts: 1 } },
    });
    const view = await client.wait(id, { timeoutMs: TIMEOUT });
    expect(view.session.state).toBe('FAILED');
    expect(view.session.failure?.code).toBe('STRUCTURE_BROKEN');
    expect(view.session.failure?.reason).toContain(
      'the plan has 3 tasks, more than budget.maxTasks allows (2)',
    );
  });

  it('names the broken structure when a first plan that cannot run is rejected', async () => {
    const path = scenarios.write('cyclic-only', {
      plans: [{ tasks: cyclic }],
      planJudgements: [{ score: 90, isAcceptable: true }],
    });
    const { client, id } = await run(path, {
      instruction,
      config: { refinement: { maxRefinementAttempts: 0 } },
    });
    const view = await client.wait(id, { timeoutMs: TIMEOUT });
    expect(view.session.state).toBe('FAILED');
    expect(view.session.failure).toMatchObject({
      code: 'PLAN_REJECTED',
      reason: expect.stringMatching(/; the plan cannot run as given: dependency cycle: /),
    });
  });

  it('rejects the plan with its reason in the history once the attempts are used up', async () => {
    const path = scenarios.write('never-good', {
      planJudgements: [
        { score: 40, isAcceptable: false, issues: ['Too vague'] },
        { score: 50, isAcceptable: false, issues: ['Still vague'] },
        { score: 60, isAcceptable: false, issues: ['Still vague'] },
      ],
    });
    const { client, id } = await run(path, { instruction });
    const view = await client.wait(id, { timeoutMs: TIMEOUT });
    expect(view.session.state).toBe('FAILED');
    expect(view.session.failure?.code).toBe('PLAN_REJECTED');

    const lines = (await client.historyJsonl(id))
      .trimEnd()
      .split('\n')
      .map((l) => JSON.parse(l) as Record<string, unknown>);
    const refinement = lines.filter(
      (l) => l.type === 'decision' && String(l.decision).startsWith('refinement:'),
    );
    expect(refinement.map((l) => l.decision)).toEqual([
      'refinement:replan',
      'refinement:replan',
      'refinement:reject',
    ]);
    const reject = refinement[2] as { reason: string; inputs: Record<string, unknown> };
    expect(reject.inputs).toMatchObject({
      reasonCode: 'max_attempts_reached',
      attemptCount: 2,
      score: 60,
    });
    expect(reject.reason).toContain('maxRefinementAttempts 2');
    const failed = lines.find((l) => l.type === 'state_change' && l.to === 'FAILED');
    expect(failed).toMatchObject({ entity: 'session', from: 'PLANNING', reason: reject.reason });
    expect(view.session.failure?.reason).toBe(reject.reason);
  });
});

describe('blocked tasks and resume (seed 001)', () => {
  const blocked = exampleScenario('blocked-task.yaml');

  async function untilBlocked(models?: RoleModels) {
    const started = await run(blocked, models ? { models } : {});
    const view = await started.client.wait(started.id, { timeoutMs: TIMEOUT });
    expect(view.session.state).toBe('BLOCKED');
    expect(task(view, 't1').state).toBe('DONE');
    expect(task(view, 't2').state).toBe('BLOCKED');
    expect(task(view, 't3')).toMatchObject({ state: 'READY', pendingDependencies: 1, attempts: 0 });
    expect(view.counters).toEqual({ open: 2, active: 0 });
    const h = await historyOf(started.client, started.id);
    expect(decisions(h, 'task:blocked')[0]?.inputs).toMatchObject({ cause: 'judge_blocked' });
    return started;
  }

  it('refuses a resume or a cancel that could change nothing, saying why, and queues nothing', async () => {
    const { client, id } = await untilBlocked();
    const refused = async (call: Promise<unknown>, code: string, message: string) =>
      expect(call).rejects.toMatchObject({ code, message: expect.stringContaining(message) });
    await refused(client.resume(id, { taskIds: ['nope'] }), 'NOT_FOUND', 'has no task nope');
    await refused(
      client.resume(id, { taskIds: ['t1', 't2'] }),
      'INVALID_STATE',
      'only blocked tasks can be resumed: t1 is DONE',
    );
    await refused(client.resume(id, { taskIds: ['bad id'] }), 'VALIDATION_FAILED', 'taskIds.0');
    await refused(client.resume(id, { mode: 'continue', note: '' }), 'VALIDATION_FAILED', 'note');
    await refused(client.resume('not a session'), 'VALIDATION_FAILED', 'session id');
    await refused(client.cancel('not a session'), 'VALIDATION_FAILED', 'session id');
    const before = (await historyOf(client, id)).length;

    await client.resume(id, { mode: 'skip', taskIds: ['t2'] });
    const done = await client.wait(id, { timeoutMs: TIMEOUT, until: 'finished' });
    expect(done.session.state).toBe('COMPLETED');
    await refused(client.resume(id), 'INVALID_STATE', 'is COMPLETED');
    await refused(client.cancel(id), 'INVALID_STATE', `Session ${id} is already COMPLETED`);
    // Only the one valid resume reached the coordinator: nothing was recorded as ignored.
    const h = await historyOf(client, id);
    expect(h.length).toBeGreaterThan(before);
    expect(decisions(h, 'event:ignored')).toEqual([]);
    expect(decisions(h, 'resume:skip')).toHaveLength(1);
  });

  it('refuses to resume a running session that has no blocked task', async () => {
    const release = deferred();
    const { models } = recordingModels(exampleScenario('diamond.yaml'), {
      beforeExecute: () => release.promise,
    });
    const { client, id } = await run(exampleScenario('diamond.yaml'), { models });
    await eventually(
      async () => ((await client.get(id)).session.state === 'RUNNING' ? true : undefined),
      'the session to run',
    );
    await expect(client.resume(id)).rejects.toMatchObject({
      code: 'INVALID_STATE',
      message: expect.stringContaining(`session ${id} has no blocked task to resume`),
    });
    release.resolve();
    expect((await client.wait(id, { timeoutMs: TIMEOUT })).session.state).toBe('COMPLETED');
  });

  it('runs the blocked task again on resume retry and completes', async () => {
    const { client, id } = await untilBlocked();
    await client.resume(id, { mode: 'retry' });
    const view = await client.wait(id, { timeoutMs: TIMEOUT, until: 'finished' });
    expect(view.session.state).toBe('COMPLETED');
    expect(task(view, 't2')).toMatchObject({ state: 'DONE', attempts: 2 });
    expect(task(view, 't3')).toMatchObject({ state: 'DONE', attempts: 1 });
    const h = await historyOf(client, id);
    expect(decisions(h, 'resume:retry')).toHaveLength(1);
    expect(executionsOf(h, 't2')).toHaveLength(2);
    expect(taskMoved(h, 't3', 'RUNNING')).toBeGreaterThan(taskMoved(h, 't2', 'DONE'));
  });

  it('skips the blocked task on resume skip and runs its dependents', async () => {
    const { client, id } = await untilBlocked();
    await client.resume(id, { mode: 'skip' });
    const view = await client.wait(id, { timeoutMs: TIMEOUT, until: 'finished' });
    expect(view.session.state).toBe('COMPLETED');
    expect(task(view, 't2')).toMatchObject({ state: 'SKIPPED', attempts: 1 });
    expect(task(view, 't3')).toMatchObject({ state: 'DONE', attempts: 1 });
    const h = await historyOf(client, id);
    expect(executionsOf(h, 't2')).toHaveLength(1);
    expect(taskMoved(h, 't3', 'RUNNING')).toBeGreaterThan(taskMoved(h, 't2', 'SKIPPED'));
  });

  it("hands the note of resume continue to the task's next execution as feedback", async () => {
    const { models, calls } = recordingModels(blocked);
    const { client, id } = await untilBlocked(models);
    const note = 'Use the deploy token from the vault';
    await client.resume(id, { mode: 'continue', note });
    const view = await client.wait(id, { timeoutMs: TIMEOUT, until: 'finished' });
    expect(view.session.state).toBe('COMPLETED');
    const t2Runs = calls.execute.filter((r) => r.sessionId === id && r.task.id === 't2');
    expect(t2Runs.map((r) => [r.attempt, r.feedback])).toEqual([
      [1, undefined],
      [2, note],
    ]);
    expect(task(view, 't2').result?.log).toContain(`applied feedback: ${note}`);
    // Done clears the feedback: it was for that execution only.
    expect(task(view, 't2').feedback).toBeUndefined();
  });
});

describe('continuations (seed 001)', () => {
  it('runs a task judged "continue" once a second time with the feedback, then completes', async () => {
    const { models, calls } = recordingModels(exampleScenario('continue-then-done.yaml'));
    const { client, id } = await run(exampleScenario('continue-then-done.yaml'), { models });
    const view = await client.wait(id, { timeoutMs: TIMEOUT });
    expect(view.session.state).toBe('COMPLETED');
    expect(task(view, 't1')).toMatchObject({ state: 'DONE', attempts: 2, continuations: 1 });
    const runs = calls.execute.filter((r) => r.sessionId === id);
    expect(runs).toHaveLength(2);
    expect(runs[1]?.feedback).toContain('The usage and license sections are missing');
    expect(runs[1]?.feedback).toContain('- license section');
    const h = await historyOf(client, id);
    expect(decisions(h, 'task:continue')).toHaveLength(1);
    expect(decisions(h, 'task:done')).toHaveLength(1);
    expect(executionsOf(h, 't1')).toHaveLength(2);
  });

  it('blocks a task that keeps asking to continue past maxContinuations', async () => {
    const path = scenarios.write('always-continue', {
      plans: [{ tasks: [{ id: 't1', title: 'Endless', acceptance: 'never', context: 'c' }] }],
      planJudgements: [{ score: 90, isAcceptable: true }],
      tasks: {
        t1: { judgements: [{ success: false, shouldContinue: true, reason: 'Not yet' }] },
      },
    });
    const { client, id } = await run(path, { config: { execution: { maxContinuations: 2 } } });
    const view = await client.wait(id, { timeoutMs: TIMEOUT });
    expect(view.session.state).toBe('BLOCKED');
    expect(task(view, 't1')).toMatchObject({ state: 'BLOCKED', attempts: 3, continuations: 2 });
    const h = await historyOf(client, id);
    expect(decisions(h, 'task:continue')).toHaveLength(2);
    // The task says why it is blocked: the reason of its change to BLOCKED.
    const toBlocked = h.find(
      (e) => e.type === 'state_change' && e.taskId === 't1' && e.to === 'BLOCKED',
    );
    expect(toBlocked?.type === 'state_change' && toBlocked.reason).toBeTruthy();
    expect(task(view, 't1').blockedReason).toBe(
      toBlocked?.type === 'state_change' ? toBlocked.reason : undefined,
    );
    // A resume moves it on, and the reason goes with the state.
    await client.resume(id, { mode: 'skip' });
    const resumed = await client.wait(id, { timeoutMs: TIMEOUT });
    expect(task(resumed, 't1').state).not.toBe('BLOCKED');
    expect(task(resumed, 't1').blockedReason).toBeUndefined();
    const [blocked] = decisions(h, 'task:blocked');
    expect(blocked?.inputs).toMatchObject({
      cause: 'max_continuations',
      maxContinuations: 2,
      attempt: 3,
    });
  });
});

describe('a task already satisfied (issue 50)', () => {
  it("is SKIPPED on the judge's word, with the reason, and its dependents run", async () => {
    const { client, id } = await run(exampleScenario('already-satisfied.yaml'));
    const view = await client.wait(id, { timeoutMs: TIMEOUT });
    expect(view.session.state).toBe('COMPLETED');
    expect(view.tasks.map((t) => [t.id, t.state])).toEqual([
      ['A', 'SKIPPED'],
      ['B', 'DONE'],
      ['C', 'DONE'],
    ]);
    const h = await historyOf(client, id);
    const [satisfied] = decisions(h, 'task:satisfied');
    expect(satisfied?.taskId).toBe('A');
    expect(satisfied?.reason).toContain('already satisfied');
    expect(satisfied?.reason).toContain('The route existed before this task ran');
    expect(taskMoved(h, 'B', 'RUNNING')).toBeGreaterThan(taskMoved(h, 'A', 'SKIPPED'));
    // A SKIPPED task is not in the result: the session's result is its final tasks B and C.
    const result = await client.result(id);
    expect(result.text).toContain('## B: ');
    expect(result.text).toContain('## C: ');
    expect(result.text).not.toContain('## A: ');
  });

  it('with judging.checkAlreadySatisfied, skips a task met before it runs, without running it', async () => {
    const path = scenarios.write('check-before-run', {
      plans: [
        {
          tasks: [
            { id: 'A', title: 'Schema', acceptance: 'the schema exists', context: 'c' },
            {
              id: 'B',
              title: 'Indexer',
              acceptance: 'rows indexed',
              context: 'c',
              dependencies: ['A'],
            },
            { id: 'C', title: 'API', acceptance: 'GET /search', context: 'c', dependencies: ['B'] },
          ],
        },
      ],
      planJudgements: [{ score: 90, isAcceptable: true }],
      tasks: {
        B: { beforeRun: { success: true, alreadySatisfied: true, reason: 'A indexed the rows' } },
      },
    });
    const { models, calls } = recordingModels(path);
    const { client, id } = await run(path, {
      models,
      config: { judging: { checkAlreadySatisfied: true } },
    });
    const view = await client.wait(id, { timeoutMs: TIMEOUT });
    expect(view.session.state).toBe('COMPLETED');
    expect(view.tasks.map((t) => [t.id, t.state])).toEqual([
      ['A', 'DONE'],
      ['B', 'SKIPPED'],
      ['C', 'DONE'],
    ]);
    // B never went to a worker; A and C were asked about once each, then ran.
    const executed = calls.execute.filter((r) => r.sessionId === id).map((r) => r.task.id);
    expect(executed.sort()).toEqual(['A', 'C']);
    const asked = calls.judgeTask.filter((r) => r.sessionId === id && r.beforeRun);
    expect(asked.map((r) => r.task.id).sort()).toEqual(['A', 'B', 'C']);
    // B was asked with A's output in hand.
    expect(asked.find((r) => r.task.id === 'B')?.beforeRun?.dependencyResults).toEqual([
      expect.objectContaining({ taskId: 'A' }),
    ]);
    const h = await historyOf(client, id);
    expect(decisions(h, 'task:satisfied').map((d) => d.taskId)).toEqual(['B']);
    expect(
      decisions(h, 'task:run')
        .map((d) => d.taskId)
        .sort(),
    ).toEqual(['A', 'C']);
    expect(executionsOf(h, 'B')).toHaveLength(0);
  });

  it('asks nothing before a task runs without judging.checkAlreadySatisfied', async () => {
    const { models, calls } = recordingModels(exampleScenario('diamond.yaml'));
    const { client, id } = await run(exampleScenario('diamond.yaml'), { models });
    await client.wait(id, { timeoutMs: TIMEOUT });
    expect(calls.judgeTask.filter((r) => r.sessionId === id && r.beforeRun)).toHaveLength(0);
  });

  it('refuses a scenario whose verdict says alreadySatisfied without success', async () => {
    const path = scenarios.write('satisfied-failure', {
      plans: [{ tasks: [{ id: 't1', title: 'T', acceptance: 'a', context: 'c' }] }],
      planJudgements: [{ score: 90, isAcceptable: true }],
      tasks: { t1: { judgements: [{ success: false, alreadySatisfied: true }] } },
    });
    const { client, id } = await run(path);
    const view = await client.wait(id, { timeoutMs: TIMEOUT });
    expect(view.session.state).toBe('FAILED');
    expect(view.session.failure?.reason).toContain(
      'alreadySatisfied: true goes with success: true only',
    );
  });
});

describe('cancel', () => {
  it('stops an execution in flight at the cancel and drops its result', async () => {
    const executing = deferred();
    const stopped = deferred();
    const { models, calls } = recordingModels(exampleScenario('diamond.yaml'), {
      async beforeExecute(request) {
        if (request.task.id !== 'A') return;
        executing.resolve();
        // The execution runs until its signal says the session ended (the cancel's announcement).
        await new Promise<void>((resolve) => {
          if (request.signal?.aborted) resolve();
          request.signal?.addEventListener('abort', () => resolve(), { once: true });
        });
        stopped.resolve();
      },
    });
    const { client, id } = await run(exampleScenario('diamond.yaml'), { models });
    await executing.promise;
    await client.cancel(id);
    expect((await client.wait(id, { timeoutMs: TIMEOUT })).session.state).toBe('CANCELLED');
    await stopped.promise;
    // The worker sees its session finished and hands nothing on: no judge job, no judgement.
    const work = await eventually(async () => {
      const job = await cluster!.pods[0]!.queues.get('work').getJob(jobIds.execute(id, 'A', 1));
      return job && (await job.getState()) === 'completed' ? job : undefined;
    }, 'the work job of A');
    expect(work.returnvalue).toBe('session not running');
    const judge = cluster!.pods[0]!.queues.get('judge');
    expect(await judge.getJob(jobIds.judgeTask(id, 'A', 1))).toBeUndefined();
    expect(calls.judgeTask.filter((r) => r.sessionId === id)).toHaveLength(0);
    const view = await client.get(id);
    expect(view.tasks.every((t) => t.state === 'CANCELLED' && t.result === undefined)).toBe(true);
    expect(executionsOf(await historyOf(client, id), 'A')).toHaveLength(0);
  });

  it('cancels the session and its open tasks, and ignores results that arrive later', async () => {
    const judging = deferred();
    const release = deferred();
    const { models } = recordingModels(exampleScenario('diamond.yaml'), {
      async beforeJudgeTask(request) {
        if (request.task.id !== 'A') return;
        judging.resolve();
        await release.promise;
      },
    });
    const { client, id } = await run(exampleScenario('diamond.yaml'), { models });
    try {
      await judging.promise; // A has been executed and its judgement is under way
      await client.cancel(id, 'no longer needed');
      const view = await client.wait(id, { timeoutMs: TIMEOUT });
      expect(view.session.state).toBe('CANCELLED');
      expect(view.tasks.map((t) => t.state)).toEqual([
        'CANCELLED',
        'CANCELLED',
        'CANCELLED',
        'CANCELLED',
      ]);
      expect(view.counters).toEqual({ open: 0, active: 0 });
    } finally {
      release.resolve();
    }
    // The late judgement of A reaches the coordinator and changes nothing.
    const ignored = await eventually(async () => {
      const h = await historyOf(client, id);
      return decisions(h, 'event:ignored').find((d) => d.reason.startsWith('task-judged'));
    }, 'the late judgement to be ignored');
    expect(ignored.reason).toContain('CANCELLED');
    const after = await client.get(id);
    expect(after.session.state).toBe('CANCELLED');
    expect(task(after, 'A').state).toBe('CANCELLED');
    const h = await historyOf(client, id);
    expect(executionsOf(h, 'A')).toHaveLength(0);
    // Nothing was dispatched after A: B, C and D never ran.
    const started = h.filter(
      (e) => e.type === 'state_change' && e.entity === 'task' && e.to === 'RUNNING',
    );
    expect(started.map((e) => e.taskId)).toEqual(['A']);
  });
});
