import { afterAll, describe, expect, it } from 'vitest';
import type { Task } from '../../src/shared/domain/task.js';
import { clusterPerTest } from '../support/cluster.js';
import { decisions, executionsOf, historyOf, scenarioDir } from '../support/scenarios.js';

const startCluster = clusterPerTest();
const scenarios = scenarioDir();
afterAll(() => scenarios.cleanup());

const TIMEOUT = 15_000;
const executorOf = (tasks: Task[]) => Object.fromEntries(tasks.map((t) => [t.id, t.executor]));

describe("a plan's executor choices", () => {
  const plan = {
    tasks: [
      { id: 'A', title: 'Run the migration', acceptance: 'Schema is current', executor: 'command' },
      { id: 'B', title: 'Write the summary', acceptance: 'Summary exists', executor: 'agent' },
      { id: 'C', title: 'List the tables', acceptance: 'Tables listed', executor: 'llm' },
      { id: 'D', title: 'Review', acceptance: 'Reviewed', dependencies: ['A', 'B', 'C'] },
    ],
  };
  const accepted = { score: 90, isAcceptable: true };

  it('are taken out by default, recorded, and the tasks run on the default executor', async () => {
    const cluster = await startCluster();
    const { id } = await cluster.client.submit({
      instruction: 'Migrate the schema and summarise it',
      config: {
        llm: {
          scenario: scenarios.write('chooses', { plans: [plan], planJudgements: [accepted] }),
        },
      },
    });
    const view = await cluster.client.wait(id, { timeoutMs: TIMEOUT });
    expect(view.session.state, JSON.stringify(view.session)).toBe('COMPLETED');
    // "llm" is the default executor, so naming it is no choice to refuse.
    expect(executorOf(view.tasks)).toEqual({ A: undefined, B: undefined, C: 'llm', D: undefined });
    const h = await historyOf(cluster.client, id);
    const [refused, ...more] = decisions(h, 'executor:refused');
    expect(more).toEqual([]);
    expect(refused?.reason).toBe(
      'A named "command", B named "agent", but tasks may not choose an executor ' +
        '(execution.taskExecutors is empty); they run on "llm" (execution.defaultExecutor)',
    );
    expect(refused?.inputs).toEqual({
      refused: [
        { taskId: 'A', executor: 'command' },
        { taskId: 'B', executor: 'agent' },
      ],
      taskExecutors: [],
      defaultExecutor: 'llm',
    });
    // The planner's own plan stays in the history as it was proposed.
    const proposed = h.find((e) => e.type === 'plan' && e.source === 'planner');
    expect(JSON.stringify(proposed)).toContain('"executor":"command"');
    for (const t of ['A', 'B']) expect(executionsOf(h, t)[0]?.result.error, t).toBeUndefined();
  });

  it('keep what execution.taskExecutors allows', async () => {
    const cluster = await startCluster();
    const { id } = await cluster.client.submit({
      instruction: 'Migrate the schema and summarise it',
      config: {
        execution: { taskExecutors: ['command'] },
        llm: {
          scenario: scenarios.write('allowed', { plans: [plan], planJudgements: [accepted] }),
        },
      },
    });
    // A keeps "command", which this cluster has no repository for: its run fails, which is
    // enough to see that it was handed to the command executor.
    const view = await cluster.client.wait(id, { timeoutMs: TIMEOUT, until: 'settled' });
    expect(executorOf(view.tasks)).toMatchObject({ A: 'command', B: undefined, C: 'llm' });
    const h = await historyOf(cluster.client, id);
    expect(decisions(h, 'executor:refused').map((d) => d.inputs['refused'])).toEqual([
      [{ taskId: 'B', executor: 'agent' }],
    ]);
  });

  it("of the Replanner's subtasks are taken out too, recorded on the replaced task", async () => {
    const cluster = await startCluster();
    const path = scenarios.write('replan-chooses', {
      plans: [{ tasks: [{ id: 't1', title: 'Ship the fix', acceptance: 'Fix shipped' }] }],
      tasks: {
        t1: {
          judgements: [{ success: false, shouldReplan: true, reason: 'Too big for one step' }],
          replan: {
            reason: 'Split it',
            tasks: [
              { id: 'a', title: 'Write the fix', acceptance: 'Fix written', executor: 'agent' },
              { id: 'b', title: 'Ship it', acceptance: 'Shipped', dependencies: ['a'] },
            ],
          },
        },
      },
    });
    const { id } = await cluster.client.submit({
      instruction: 'Ship the fix',
      config: { llm: { scenario: path } },
    });
    const view = await cluster.client.wait(id, { timeoutMs: TIMEOUT });
    expect(view.session.state).toBe('COMPLETED');
    expect(view.tasks.filter((t) => t.state === 'DONE').every((t) => !t.executor)).toBe(true);
    const [refused] = decisions(await historyOf(cluster.client, id), 'executor:refused');
    expect(refused).toMatchObject({
      taskId: 't1',
      inputs: { refused: [{ taskId: 'a', executor: 'agent' }] },
    });
  });
});
