import { describe, expect, it } from 'vitest';
import type { ScenarioInput } from '../../src/shared/config/scenario.js';
import { formatSessionTable } from '../../src/producers/cli/format.js';
import { clusterPerTest } from '../support/cluster.js';
import { deferred, eventually, recordingModels } from '../support/scenarios.js';

const startCluster = clusterPerTest();
const TIMEOUT = 20_000;

const THREE_AT_ONCE: ScenarioInput = {
  plans: [
    {
      tasks: ['A', 'B', 'C'].map((id) => ({ id, title: id, acceptance: 'a', context: 'c' })),
    },
  ],
  planJudgements: [{ score: 90, isAcceptable: true }],
};

/**
 * The coordinator marks a task RUNNING when it queues its work job, so RUNNING alone cannot
 * tell a task a worker runs from one that waits for a free (or any) worker: the view says which.
 */
describe('executing tasks that no worker has taken yet', () => {
  it('are listed as queued by client.get and orq status until a worker takes them', async () => {
    const executing = deferred();
    const release = deferred();
    const { models } = recordingModels(THREE_AT_ONCE, {
      beforeExecute: async (request) => {
        if (request.task.id !== 'A') return;
        executing.resolve();
        await release.promise;
      },
    });
    // Every role but the worker: the three tasks are dispatched and wait.
    const cluster = await startCluster({
      models,
      roles: ['planner', 'judge', 'replanner', 'coordinator'],
    });
    const { id } = await cluster.client.submit({ instruction: 'A, B and C' });
    const waiting = await eventually(async () => {
      const view = await cluster.client.get(id);
      return view.tasks.length === 3 && view.tasks.every((t) => t.state === 'RUNNING')
        ? view
        : undefined;
    }, 'three tasks dispatched');
    expect(waiting.queued).toEqual(['A', 'B', 'C']);
    expect(formatSessionTable(waiting)).toContain('3 tasks: 3 RUNNING (3 queued)');

    // One worker that runs one job at a time takes A and holds it: B and C still wait.
    await cluster.startPod(['worker'], { concurrency: 1 });
    await executing.promise;
    const view = await cluster.client.get(id);
    expect(view.tasks.find((t) => t.id === 'A')?.state).toBe('RUNNING');
    expect(view.queued).toEqual(['B', 'C']);
    const table = formatSessionTable(view);
    expect(table).toMatch(/^A\s+RUNNING\s/m);
    expect(table).toMatch(/^B\s+RUNNING \(queued\)\s/m);

    release.resolve();
    const done = await cluster.client.wait(id, { timeoutMs: TIMEOUT });
    expect(done.session.state).toBe('COMPLETED');
    expect(done.queued).toEqual([]);
  });
});
