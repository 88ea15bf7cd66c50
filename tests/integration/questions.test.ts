import { describe, expect, it } from 'vitest';
import type { HistoryEntry } from '../../src/shared/domain/history.js';
import { clusterPerTest } from '../support/cluster.js';
import {
  budgetQuestionModels,
  budgetStoppedQuestion,
  questionAsked,
} from '../support/budget-question.js';
import { bullQueue } from '../support/pods.js';
import { decisions, eventually, historyOf, recordingModels } from '../support/scenarios.js';
import { ASKS, QUESTION } from '../support/question-scenario.js';

const startCluster = clusterPerTest();
const TIMEOUT = 20_000;

async function asking() {
  const { models, calls } = recordingModels(ASKS);
  const c = await startCluster({ models });
  const session = await c.client.submit({ instruction: 'Build and push the image' });
  const view = await c.client.wait(session.id, { timeoutMs: TIMEOUT });
  expect(view.session.state).toBe('BLOCKED');
  return { c, id: session.id, calls, view };
}

const waitEntries = (all: HistoryEntry[]) =>
  all.filter((e): e is Extract<HistoryEntry, { type: 'wait' }> => e.type === 'wait');

describe('questions (the judge blocks a task for information a person has)', () => {
  it('opens a question with the judge text, listed as waiting, and recorded in the history', async () => {
    const { c, id, view } = await asking();
    expect(view.session.questions).toEqual([
      expect.objectContaining({
        id: 'question-t2-1',
        kind: 'question',
        taskId: 't2',
        attempt: 1,
        question: QUESTION,
      }),
    ]);
    expect(view.tasks.find((t) => t.id === 't2')?.state).toBe('BLOCKED');
    expect(await c.client.waiting()).toEqual([expect.objectContaining({ id })]);
    const opened = waitEntries(await historyOf(c.client, id));
    expect(opened).toEqual([
      expect.objectContaining({ action: 'opened', waitId: 'question-t2-1', kind: 'question' }),
    ]);
  });

  it('runs the task again with the question and the answer in its prompt, once', async () => {
    const { c, id, calls } = await asking();
    const outcome = await c.client.answerQuestion(id, 'staging, please', {
      taskId: 't2',
      by: 'test',
    });
    expect(outcome).toMatchObject({ waitId: 'question-t2-1', applied: true });
    const done = await c.client.wait(id, { timeoutMs: TIMEOUT });
    expect(done.session.state).toBe('COMPLETED');
    expect(done.session.questions).toBeUndefined();
    const second = calls.execute.find((r) => r.task.id === 't2' && r.attempt === 2);
    expect(second?.feedback).toContain(QUESTION);
    expect(second?.feedback).toContain('staging, please');

    const again = await c.client.answerQuestion(id, 'production', { taskId: 't2' }).catch((e) => e);
    expect(again).toMatchObject({ code: 'WAIT_ENDED' });
    const all = await historyOf(c.client, id);
    expect(waitEntries(all).map((e) => [e.action, e.answer, e.by])).toEqual([
      ['opened', undefined, undefined],
      ['answered', { action: 'answer', text: 'staging, please' }, 'test'],
    ]);
    expect(decisions(all, 'question:answer')).toHaveLength(1);
    expect(await c.client.waiting()).toEqual([]);
  });

  it('applies one of two answers given at once, and refuses the other with WAIT_ENDED', async () => {
    const { models } = recordingModels(ASKS);
    const c = await startCluster({ models, roles: ['planner', 'judge', 'worker', 'replanner'] });
    const coordinator = await c.startPod(['coordinator']);
    const session = await c.client.submit({ instruction: 'Build and push the image' });
    expect((await c.client.wait(session.id, { timeoutMs: TIMEOUT })).session.state).toBe('BLOCKED');
    await coordinator.close(5_000);
    const first = c.client.answerQuestion(session.id, 'staging', { waitMs: 15_000 });
    const second = c.client.answerQuestion(session.id, 'production', { waitMs: 15_000 });
    await new Promise((r) => setTimeout(r, 500));
    await c.startPod(['coordinator']);
    const outcomes = await Promise.allSettled([first, second]);
    expect(outcomes.filter((o) => o.status === 'fulfilled')).toHaveLength(1);
    const refused = outcomes.filter((o) => o.status === 'rejected');
    expect((refused[0] as PromiseRejectedResult).reason).toMatchObject({ code: 'WAIT_ENDED' });
    const answered = waitEntries(await historyOf(c.client, session.id)).filter(
      (e) => e.action === 'answered',
    );
    expect(answered).toHaveLength(1);
  });

  it('refuses a plan answer to a question, and a question answer naming no open question', async () => {
    const { c, id } = await asking();
    await expect(c.client.approve(id)).rejects.toMatchObject({ code: 'WAIT_ENDED' });
    await expect(c.client.answerQuestion(id, 'x', { taskId: 't1' })).rejects.toMatchObject({
      code: 'WAIT_ENDED',
    });
    await expect(c.client.answerQuestion(id, '  ')).rejects.toMatchObject({
      code: 'VALIDATION_FAILED',
    });
    expect((await c.client.get(id)).session.questions).toHaveLength(1);
  });

  it('ends the question when the task is resumed (a note answers it) or the session cancelled', async () => {
    const resumed = await asking();
    await resumed.c.client.resume(resumed.id, { mode: 'continue', note: 'use staging' });
    expect((await resumed.c.client.wait(resumed.id, { timeoutMs: TIMEOUT })).session.state).toBe(
      'COMPLETED',
    );
    expect(
      waitEntries(await historyOf(resumed.c.client, resumed.id)).map((e) => [e.action, e.by]),
    ).toEqual([
      ['opened', undefined],
      ['answered', 'resume'],
    ]);

    const cancelled = await asking();
    await cancelled.c.client.cancel(cancelled.id);
    const view = await cancelled.c.client.wait(cancelled.id, {
      timeoutMs: TIMEOUT,
      until: 'finished',
    });
    expect(view.session.state).toBe('CANCELLED');
    expect(view.session.questions).toBeUndefined();
    expect(
      waitEntries(await historyOf(cancelled.c.client, cancelled.id)).map((e) => e.action),
    ).toEqual(['opened', 'cancelled']);
  });

  it('keeps a question open across a budget stop: the answer is refused until the budget is raised, then runs the task', async () => {
    const { c, id, calls } = await budgetStoppedQuestion(startCluster);
    const stopped = await c.client.get(id);
    expect(stopped.session.questions?.map((q) => q.id)).toEqual(['question-Q-1']);
    expect(stopped.tasks.map((t) => [t.id, t.state])).toEqual([
      ['Q', 'BLOCKED'],
      ['W', 'CANCELLED'],
    ]);

    // Before, WAIT_ENDED: as if the question had ended, and nothing said how to go on.
    const refused = await c.client.answerQuestion(id, 'staging').catch((error: unknown) => error);
    expect(refused).toMatchObject({
      code: 'BUDGET_EXHAUSTED',
      hint: expect.stringContaining(`orq resume ${id} --max-tokens <n>`),
    });
    expect((refused as Error).message).toContain('question-Q-1 stays open');

    // Raised, W runs again; Q keeps waiting with its question, and the answer runs it.
    await c.client.resume(id, { budget: { maxTokens: 1_000_000 } });
    const blocked = await c.client.wait(id, { timeoutMs: TIMEOUT });
    expect(blocked.session.state).toBe('BLOCKED');
    expect(blocked.session.questions?.map((q) => q.id)).toEqual(['question-Q-1']);
    await c.client.answerQuestion(id, 'staging', { taskId: 'Q' });
    const done = await c.client.wait(id, { timeoutMs: TIMEOUT });
    expect(done.session.state).toBe('COMPLETED');
    const second = calls.execute.find((r) => r.task.id === 'Q' && r.attempt === 2);
    expect(second?.feedback).toContain('staging');
    expect(waitEntries(await historyOf(c.client, id)).map((e) => e.action)).toEqual([
      'opened',
      'answered',
    ]);
  });

  it('refuses with BUDGET_EXHAUSTED an answer sent before a budget stop the coordinator applied first', async () => {
    const { models, spend, submit } = budgetQuestionModels();
    const c = await startCluster({ models, roles: ['planner', 'judge', 'worker', 'replanner'] });
    const coordinator = await c.startPod(['coordinator'], { concurrency: 1 });
    const { id } = await c.client.submit(submit);
    await questionAsked(c, id);
    await coordinator.close(5_000);
    // W's refused verdict is reported to the coordinator's queue, and waits there.
    spend();
    const queue = bullQueue(c.client.store.redis, c.prefix, 'coordinator');
    try {
      await eventually(
        async () =>
          (await queue.getJobs(['waiting'])).some((j) => j.name === 'job-failed') || undefined,
        "W's refusal reported",
      );
    } finally {
      await queue.close();
    }
    // The session still looks open to the client, which queues the answer after the refusal.
    const answer = c.client
      .answerQuestion(id, 'staging', { waitMs: TIMEOUT })
      .catch((error: unknown) => error);
    await c.startPod(['coordinator'], { concurrency: 1 });
    expect(await answer).toMatchObject({ code: 'BUDGET_EXHAUSTED' });
    const view = await c.client.get(id);
    expect(view.session.state).toBe('BUDGET_EXHAUSTED');
    expect(view.session.questions?.map((q) => q.id)).toEqual(['question-Q-1']);
  });
});
