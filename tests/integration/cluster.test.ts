import { describe, expect, it } from 'vitest';
import { clusterPerTest, type TestCluster } from '../support/cluster.js';
import {
  exampleScenario,
  executionsOf,
  historyOf,
  recordingModels,
  taskMoved,
} from '../support/scenarios.js';

let cluster: TestCluster | undefined;
const startCluster = clusterPerTest();

describe('several coordinators and workers at once', () => {
  it('runs 10 diamond sessions on 3 pods, every task exactly once and in order', async () => {
    const { models, calls } = recordingModels(exampleScenario('diamond.yaml'));
    cluster = await startCluster({ pods: 3, models });
    const { client } = cluster;
    const sessions = await Promise.all(
      Array.from({ length: 10 }, (_, i) => client.submit({ instruction: `Search feature ${i}` })),
    );
    const views = await Promise.all(sessions.map((s) => client.wait(s.id, { timeoutMs: 20_000 })));

    for (const view of views) {
      const id = view.session.id;
      expect(view.session.state).toBe('COMPLETED');
      expect(view.tasks.map((t) => [t.id, t.state, t.attempts])).toEqual([
        ['A', 'DONE', 1],
        ['B', 'DONE', 1],
        ['C', 'DONE', 1],
        ['D', 'DONE', 1],
      ]);
      expect(view.counters).toEqual({ open: 0, active: 0 });
      const h = await historyOf(client, id);
      for (const t of ['A', 'B', 'C', 'D']) {
        expect(executionsOf(h, t), `${id} ${t}`).toHaveLength(1);
        // The model was called once per task, whichever pod's worker took it.
        expect(calls.execute.filter((r) => r.sessionId === id && r.task.id === t)).toHaveLength(1);
      }
      expect(taskMoved(h, 'D', 'RUNNING')).toBeGreaterThan(taskMoved(h, 'B', 'DONE'));
      expect(taskMoved(h, 'D', 'RUNNING')).toBeGreaterThan(taskMoved(h, 'C', 'DONE'));
      expect(h.filter((e) => e.type === 'state_change' && e.to === 'COMPLETED')).toHaveLength(1);
    }
  });
});

describe('mixed sessions on several pods', () => {
  it('replans, blocks and resumes sessions side by side without running a task twice', async () => {
    cluster = await startCluster({ pods: 3 });
    const { client } = cluster;
    const submit = (scenario: string) =>
      client.submit({ instruction: 'x', config: { llm: { scenario: exampleScenario(scenario) } } });
    const replans = await Promise.all([1, 2, 3, 4].map(() => submit('replan-task.yaml')));
    const blocked = await Promise.all([1, 2, 3, 4].map(() => submit('blocked-task.yaml')));
    const continued = await Promise.all([1, 2].map(() => submit('continue-then-done.yaml')));

    // Each blocked session is resumed as soon as it settles.
    await Promise.all(
      blocked.map(async (s) => {
        expect((await client.wait(s.id, { timeoutMs: 20_000 })).session.state).toBe('BLOCKED');
        await client.resume(s.id, { mode: 'retry' });
      }),
    );
    const all = [...replans, ...blocked, ...continued];
    const views = await Promise.all(
      all.map((s) => client.wait(s.id, { timeoutMs: 20_000, until: 'finished' })),
    );
    for (const view of views) {
      expect(view.session.state).toBe('COMPLETED');
      expect(view.counters).toEqual({ open: 0, active: 0 });
      const h = await historyOf(client, view.session.id);
      for (const t of view.tasks) {
        const executions = executionsOf(h, t.id).map((e) => e.attempt);
        // One execution per attempt, attempts numbered 1..n with no repeats.
        expect(executions).toEqual(Array.from({ length: t.attempts }, (_, i) => i + 1));
      }
    }
    for (const view of views.slice(0, 4)) {
      expect(view.tasks.map((t) => [t.id, t.state])).toEqual([
        ['t1', 'DONE'],
        ['t2', 'REPLACED_BY_REPLAN'],
        ['t2.r1.1', 'DONE'],
        ['t2.r1.2', 'DONE'],
      ]);
    }
  });
});
