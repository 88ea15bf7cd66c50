import { describe, expect, it } from 'vitest';
import { PlanningConfig } from '../../src/shared/config/schema.js';
import { HistoryEntry } from '../../src/shared/domain/history.js';
import type { TaskStepRecord } from '../../src/shared/store/session-records.js';
import { restoreRun } from '../../src/workers/executors/agent/journal.js';
import type { AgentPlan } from '../../src/workers/executors/agent/types.js';

const planning = PlanningConfig.parse({});
const base = { timestamp: '2024-01-15T10:30:00Z', sessionId: 's1', taskId: 't1' };

const planA: AgentPlan = {
  goal_understanding: { main_objective: 'A', success_criteria: [], constraints: [] },
  task_decomposition: { reasoning: '', subtasks: [] },
  action_plan: { execution_order: [], actions: [] },
};
const planB: AgentPlan = {
  ...planA,
  goal_understanding: { ...planA.goal_understanding, main_objective: 'B' },
};

function step(n: number, entry: Record<string, unknown>, plan?: unknown): TaskStepRecord {
  return {
    step: n,
    entry: HistoryEntry.parse({ ...base, ...entry }),
    ...(plan ? { plan } : {}),
  };
}
const planStep = (n: number) =>
  step(n, { type: 'plan', source: 'agent', attempt: 1, plan: planA }, planA);
const action = (n: number, error?: string) =>
  step(n, {
    type: 'action',
    tool: 'read_file',
    input: { path: 'x' },
    ...(error ? { error } : { output: 'ok' }),
  });
const reflection = (n: number, revisionApplied: boolean) =>
  step(n, {
    type: 'reflection',
    evaluation: {
      status: 'failure',
      evaluation: 'the file is missing',
      plan_revision_needed: revisionApplied,
      plan_revision: { reason: 'write it first', changes: ['write'], plan: planB },
      trigger: 'error',
      revision_applied: revisionApplied,
    },
  });
const revision = (n: number) =>
  step(n, { type: 'revision', reason: 'write it first', changes: ['write'] }, planB);

describe('restoreRun: a crashed agent run resumes from its recorded steps', () => {
  it('starts fresh when nothing was recorded', () => {
    const state = restoreRun([], planning);
    expect(state).toMatchObject({ planned: false, nextStep: 0, transcript: [] });
    expect(state.plan).toBeUndefined();
  });

  it('keeps the recorded plan and counts the actions after it', () => {
    const state = restoreRun([planStep(0), action(1), action(2)], planning);
    expect(state.planned).toBe(true);
    expect(state.plan?.goal_understanding.main_objective).toBe('A');
    expect(state.nextStep).toBe(3);
    expect(state.counters).toEqual({
      actions: 2,
      actionsSinceReflection: 2,
      reflections: 0,
      revisions: 0,
    });
    expect(state.pendingReflection).toBeUndefined();
  });

  it('continues from the latest revision, not the first plan', () => {
    const state = restoreRun(
      [planStep(0), action(1, 'ENOENT'), reflection(2, true), revision(3)],
      planning,
    );
    expect(state.plan?.goal_understanding.main_objective).toBe('B');
    expect(state.counters).toEqual({
      actions: 1,
      actionsSinceReflection: 0,
      reflections: 1,
      revisions: 1,
    });
    expect(state.pendingRevision).toBeUndefined();
    expect(state.transcript.map((t) => t.kind)).toEqual(['action', 'reflection', 'revision']);
  });

  it('owes a reflection when it stopped right after a failed action', () => {
    expect(restoreRun([planStep(0), action(1, 'ENOENT')], planning).pendingReflection).toBe(
      'error',
    );
  });

  it('owes a reflection when it stopped right after the interval-th action', () => {
    const state = restoreRun([planStep(0), action(1), action(2), action(3)], planning);
    expect(state.pendingReflection).toBe('interval');
  });

  it('owes the revision a reflection decided on when it stopped before writing it', () => {
    const state = restoreRun([planStep(0), action(1, 'ENOENT'), reflection(2, true)], planning);
    expect(state.pendingRevision).toMatchObject({ reason: 'write it first', plan: planB });
    expect(state.pendingReflection).toBeUndefined();
  });

  it('owes nothing after a reflection that asked for no revision', () => {
    const state = restoreRun([planStep(0), action(1, 'ENOENT'), reflection(2, false)], planning);
    expect(state.pendingRevision).toBeUndefined();
    expect(state.pendingReflection).toBeUndefined();
  });
});
