import { afterAll, describe, expect, it } from 'vitest';
import { clusterPerTest } from '../support/cluster.js';
import { decisions, historyOf, scenarioDir } from '../support/scenarios.js';

/**
 * Seed 002 through the coordinator: a replan that drops the user's required terms is caught,
 * for the Planner's replans of the plan and the Replanner's replans of a task.
 */
const startCluster = clusterPerTest();
const scenarios = scenarioDir();
afterAll(() => scenarios.cleanup());

const TIMEOUT = 15_000;
const instruction = '認証機能とバリデーションを実装して';

async function run(scenario: object, config: Record<string, unknown> = {}) {
  const cluster = await startCluster();
  const path = scenarios.write(`terms-${Math.random().toString(36).slice(2)}`, scenario);
  const { id } = await cluster.client.submit({
    instruction,
    config: { ...config, llm: { scenario: path } },
  });
  return { client: cluster.client, id };
}

const keeps = [
  { id: 'A', title: '認証 API', acceptance: 'login returns a token' },
  { id: 'B', title: 'バリデーション', acceptance: 'bad input is refused', dependencies: ['A'] },
];
// Same shape, but the replan lost both terms.
const drops = [
  { id: 'A', title: 'Login API', acceptance: 'login returns a token' },
  { id: 'B', title: 'Input checks', acceptance: 'bad input is refused', dependencies: ['A'] },
];

describe("the Planner's replan of the plan", () => {
  // An acceptable plan with a suggestion, replanned once for it (refineSuggestionsOnSuccess).
  const suggestionReplan = {
    plans: [{ tasks: keeps }, { tasks: drops }],
    planJudgements: [
      { score: 75, isAcceptable: true, suggestions: ['Name the endpoints'] },
      { score: 90, isAcceptable: true },
    ],
  };
  const refinement = { refineSuggestionsOnSuccess: true };

  it('runs when it lost required terms, with a terms:warning naming them (the default)', async () => {
    const { client, id } = await run(suggestionReplan, { refinement });
    const view = await client.wait(id, { timeoutMs: TIMEOUT });
    expect(view.session.state).toBe('COMPLETED');
    expect(view.tasks.map((t) => t.title)).toEqual(['Login API', 'Input checks']);
    const h = await historyOf(client, id);
    const [warning] = decisions(h, 'terms:warning');
    expect(warning?.reason).toBe('required terms missing after replan: 認証, バリデーション');
    expect(warning?.inputs['termPreservation']).toEqual({
      preserved: [],
      missing: ['認証', 'バリデーション'],
      preservationRate: 0,
    });
    expect(decisions(h, 'structure:valid')).toHaveLength(1);
  });

  it('is not run under treatTermLossAsStructureBreak: the acceptable previous plan runs', async () => {
    const { client, id } = await run(suggestionReplan, {
      refinement: { ...refinement, treatTermLossAsStructureBreak: true },
    });
    const view = await client.wait(id, { timeoutMs: TIMEOUT });
    expect(view.session.state).toBe('COMPLETED');
    expect(view.tasks.map((t) => t.title)).toEqual(['認証 API', 'バリデーション']);
    const h = await historyOf(client, id);
    const [invalid] = decisions(h, 'structure:invalid');
    expect(invalid?.reason).toContain(
      'Required terms missing after replan: "認証", "バリデーション"',
    );
    expect(decisions(h, 'refinement:accept-previous')).toHaveLength(1);
    expect(decisions(h, 'terms:warning')).toEqual([]);
  });

  it('under treatTermLossAsStructureBreak, goes back to the Planner when the previous plan was unacceptable', async () => {
    const { client, id } = await run(
      {
        plans: [{ tasks: keeps }, { tasks: drops }, { tasks: keeps }],
        planJudgements: [
          { score: 40, isAcceptable: false, issues: ['Too vague'] },
          { score: 90, isAcceptable: true },
          { score: 85, isAcceptable: true },
        ],
      },
      { refinement: { treatTermLossAsStructureBreak: true } },
    );
    const view = await client.wait(id, { timeoutMs: TIMEOUT });
    expect(view.session.state).toBe('COMPLETED');
    expect(view.tasks.map((t) => t.title)).toEqual(['認証 API', 'バリデーション']);
    const h = await historyOf(client, id);
    expect(decisions(h, 'structure:invalid')).toHaveLength(1);
    expect(decisions(h, 'refinement:replan').map((d) => d.inputs['reasonCode'])).toEqual([
      'quality_below_threshold',
      'structure_broken',
    ]);
    expect(h.filter((e) => e.type === 'plan' && e.source === 'planner')).toHaveLength(3);
  });
});

describe("the Replanner's replan of a task", () => {
  const taskReplan = (subtasks: object[]) => ({
    plans: [{ tasks: [{ id: 't1', title: '認証とバリデーション', acceptance: 'login is safe' }] }],
    planJudgements: [{ score: 90, isAcceptable: true }],
    tasks: {
      t1: {
        judgements: [{ success: false, shouldReplan: true, reason: 'Too big for one pass' }],
        replan: { reason: 'Split it', tasks: subtasks },
      },
    },
  });
  const lostOne = [
    { id: 's1', title: '認証 API', acceptance: 'login returns a token' },
    { id: 's2', title: 'Input checks', acceptance: 'refused', dependencies: ['s1'] },
  ];

  it('applies subtasks that lost a term of the task, with a terms:warning on it (the default)', async () => {
    const { client, id } = await run(taskReplan(lostOne));
    const view = await client.wait(id, { timeoutMs: TIMEOUT });
    expect(view.session.state).toBe('COMPLETED');
    const h = await historyOf(client, id);
    const [warning, ...more] = decisions(h, 'terms:warning');
    expect(more).toEqual([]);
    expect(warning).toMatchObject({
      taskId: 't1',
      reason: 'required terms missing after the replan of t1: バリデーション',
      inputs: {
        termPreservation: {
          preserved: ['認証'],
          missing: ['バリデーション'],
          preservationRate: 0.5,
        },
      },
    });
    expect(decisions(h, 'replan:applied')).toHaveLength(1);
  });

  it('keeps quiet when the subtasks carry every term of the task', async () => {
    const keepsBoth = [lostOne[0]!, { ...lostOne[1]!, title: 'バリデーション rules' }];
    const { client, id } = await run(taskReplan(keepsBoth));
    expect((await client.wait(id, { timeoutMs: TIMEOUT })).session.state).toBe('COMPLETED');
    expect(decisions(await historyOf(client, id), 'terms:warning')).toEqual([]);
  });

  it('refuses them under treatTermLossAsStructureBreak: the task is BLOCKED, saying why', async () => {
    const { client, id } = await run(taskReplan(lostOne), {
      refinement: { treatTermLossAsStructureBreak: true },
    });
    const view = await client.wait(id, { timeoutMs: TIMEOUT, until: 'settled' });
    expect(view.session.state).toBe('BLOCKED');
    expect(view.tasks.map((t) => [t.id, t.state])).toEqual([['t1', 'BLOCKED']]);
    const [invalid] = decisions(await historyOf(client, id), 'replan:invalid');
    expect(invalid).toMatchObject({
      taskId: 't1',
      reason:
        "the Replanner's subtasks for t1 are unusable: Required terms missing after replan: " +
        '"バリデーション" (the subtasks keep 50% of the task\'s, minimum 80%).',
    });
  });
});
