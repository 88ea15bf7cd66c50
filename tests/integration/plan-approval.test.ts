import { describe, expect, it } from 'vitest';
import type { HistoryEntry } from '../../src/shared/domain/history.js';
import type { PlanApprovalWait } from '../../src/shared/domain/human-wait.js';
import { OrqError } from '../../src/shared/errors.js';
import { clusterPerTest, type TestCluster } from '../support/cluster.js';
import { bullQueue } from '../support/pods.js';
import { eventually } from '../support/scenarios.js';
import { jobIds } from '../../src/shared/queues.js';

const startCluster = clusterPerTest();
const INSTRUCTION = '認証機能とバリデーションを実装して';
const REQUIRED = { approval: { plan: 'required' as const } };

/** A session of its own cluster, waiting for its plan's approval. */
async function waitingSession(
  options: { config?: Record<string, unknown>; cluster?: TestCluster } = {},
) {
  const c = options.cluster ?? (await startCluster());
  const session = await c.client.submit({
    instruction: INSTRUCTION,
    config: { ...REQUIRED, ...options.config },
  });
  const view = await c.client.wait(session.id, { timeoutMs: 20_000 });
  expect(view.session.state).toBe('AWAITING_APPROVAL');
  return { c, id: session.id, wait: view.session.wait as PlanApprovalWait };
}

const entries = async (c: TestCluster, id: string): Promise<HistoryEntry[]> =>
  (await c.client.history(id)).map((e) => e.entry);

type Decision = Extract<HistoryEntry, { type: 'decision' }>;
const decisions = (all: HistoryEntry[], name: string): Decision[] =>
  all.filter((e): e is Decision => e.type === 'decision' && e.decision === name);

async function refusal(promise: Promise<unknown>): Promise<OrqError> {
  const error = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(OrqError);
  return error as OrqError;
}

describe('plan approval (approval.plan: required)', () => {
  it('waits with the plan, its score and the judge feedback, holding no job, then runs once approved', async () => {
    const { c, id, wait } = await waitingSession();
    expect(wait).toMatchObject({ id: 'plan-0', kind: 'plan-approval', attempt: 0 });
    expect(wait.plan.tasks.length).toBeGreaterThan(0);
    expect(typeof wait.score).toBe('number');
    const view = await c.client.get(id);
    expect(view.tasks).toEqual([]);
    // Nothing is queued for it: no worker, lock or quota is held while it waits.
    const work = bullQueue(c.client.store.redis, c.prefix, 'work');
    const plan = bullQueue(c.client.store.redis, c.prefix, 'plan');
    try {
      expect(await work.getJobCounts('waiting', 'active', 'delayed', 'prioritized')).toEqual({
        waiting: 0,
        active: 0,
        delayed: 0,
        prioritized: 0,
      });
      expect(await plan.getJobCounts('waiting', 'active', 'delayed')).toEqual({
        waiting: 0,
        active: 0,
        delayed: 0,
      });
    } finally {
      await Promise.all([work.close(), plan.close()]);
    }
    expect(await c.client.waiting()).toEqual([expect.objectContaining({ id })]);

    const outcome = await c.client.approve(id, { by: 'test', waitId: 'plan-0' });
    expect(outcome).toMatchObject({ waitId: 'plan-0', applied: true });
    const done = await c.client.wait(id, { timeoutMs: 20_000 });
    expect(done.session.state).toBe('COMPLETED');
    expect(done.session.wait).toBeUndefined();
    const all = await entries(c, id);
    expect(all.filter((e) => e.type === 'wait').map((e) => e.type === 'wait' && e.action)).toEqual([
      'opened',
      'answered',
    ]);
    expect(decisions(all, 'approval:approve')).toHaveLength(1);
    expect(await c.client.waiting()).toEqual([]);
  });

  it('refuses a second answer once the wait has ended, with WAIT_ENDED, and applies the first once', async () => {
    const { c, id } = await waitingSession();
    await c.client.approve(id);
    const error = await refusal(c.client.reject(id, 'too late'));
    expect(error.code).toBe('WAIT_ENDED');
    expect(error.message).toContain('it is RUNNING, not AWAITING_APPROVAL');
    expect(decisions(await entries(c, id), 'approval:approve')).toHaveLength(1);
  });

  it('applies one of two answers given at once, and refuses the other with WAIT_ENDED', async () => {
    const c = await startCluster({ roles: ['planner', 'judge', 'worker', 'replanner'] });
    const coordinator = await c.startPod(['coordinator']);
    const { id } = await waitingSession({ cluster: c });
    // Both are queued while no coordinator runs: both pass the producer's check.
    await coordinator.close(5_000);
    const first = c.client.approve(id, { waitMs: 15_000 });
    const second = c.client.reject(id, 'no', { waitMs: 15_000 });
    await new Promise((r) => setTimeout(r, 500));
    await c.startPod(['coordinator']);
    const outcomes = await Promise.allSettled([first, second]);
    const applied = outcomes.filter((o) => o.status === 'fulfilled');
    const refused = outcomes.filter((o) => o.status === 'rejected');
    expect(applied).toHaveLength(1);
    expect(refused).toHaveLength(1);
    expect((refused[0] as PromiseRejectedResult).reason).toMatchObject({ code: 'WAIT_ENDED' });
    const all = await entries(c, id);
    const answered = all.filter((e) => e.type === 'wait' && e.action === 'answered');
    expect(answered).toHaveLength(1);
  });

  it('refuses an answer to an older wait than the one open', async () => {
    const { c, id } = await waitingSession();
    const error = await refusal(c.client.approve(id, { waitId: 'plan-7' }));
    expect(error.code).toBe('WAIT_ENDED');
    expect(error.details).toMatchObject({ waitId: 'plan-7', currentWaitId: 'plan-0' });
    expect((await c.client.get(id)).session.state).toBe('AWAITING_APPROVAL');
  });

  it('sends a rejection to the Planner as a replan counted as an attempt, and waits on the new plan', async () => {
    const { c, id } = await waitingSession();
    await c.client.reject(id, 'split the validation into its own task');
    const again = await c.client.wait(id, { timeoutMs: 20_000 });
    expect(again.session.state).toBe('AWAITING_APPROVAL');
    expect(again.session.wait?.id).toBe('plan-1');
    expect(again.session.planning.attemptCount).toBe(1);
    const plan = bullQueue(c.client.store.redis, c.prefix, 'plan');
    try {
      const job = await plan.getJob(`plan|${id}|1`);
      expect(job?.data.feedback.issues[0]).toContain('split the validation into its own task');
    } finally {
      await plan.close();
    }
    expect(decisions(await entries(c, id), 'approval:reject')).toHaveLength(1);
  });

  it('fails the session on a rejection when no refinement attempt is left', async () => {
    const { c, id } = await waitingSession({
      config: { refinement: { maxRefinementAttempts: 0 } },
    });
    await c.client.reject(id, 'not this');
    const view = await c.client.wait(id, { timeoutMs: 20_000 });
    expect(view.session.state).toBe('FAILED');
    expect(view.session.failure).toMatchObject({ code: 'PLAN_REJECTED' });
    expect(view.session.failure?.reason).toContain('not this');
  });

  it('runs an edited plan that passes the replan rules', async () => {
    const { c, id, wait } = await waitingSession();
    const first = wait.plan.tasks[0]!;
    const edited = {
      summary: 'edited',
      tasks: [
        ...wait.plan.tasks,
        {
          id: 'review',
          title: 'Review 認証 and バリデーション together',
          acceptance: 'a reviewer signs off',
          dependencies: [first.id],
        },
      ],
    };
    await c.client.editPlan(id, edited, { by: 'test' });
    const view = await c.client.wait(id, { timeoutMs: 20_000 });
    expect(view.session.state).toBe('COMPLETED');
    expect(view.tasks.map((t) => t.id)).toContain('review');
    const all = await entries(c, id);
    expect(all.some((e) => e.type === 'plan' && e.source === 'person')).toBe(true);
    expect(decisions(all, 'approval:edit')).toHaveLength(1);
  });

  it('refuses an edit that drops a required term unless it says so', async () => {
    const { c, id, wait } = await waitingSession();
    const bare = {
      tasks: [{ id: 'only', title: 'Do something else', acceptance: 'it is done' }],
    };
    const error = await refusal(c.client.editPlan(id, bare));
    expect(error.code).toBe('VALIDATION_FAILED');
    expect(error.message).toContain('drops required terms');
    expect(error.details.droppedTerms).toEqual(expect.arrayContaining(['認証']));
    expect((await c.client.get(id)).session.state).toBe('AWAITING_APPROVAL');

    // A shape a replan may not take is refused too: a cycle.
    const [a, b] = [wait.plan.tasks[0]!.id, 'other'];
    const cyclic = {
      tasks: [
        { id: a, title: '認証', acceptance: 'x', dependencies: [b] },
        { id: b, title: 'バリデーション', acceptance: 'y', dependencies: [a] },
      ],
    };
    expect((await refusal(c.client.editPlan(id, cyclic))).message).toMatch(/cycle/i);

    await c.client.editPlan(id, bare, { allowTermLoss: true });
    const view = await c.client.wait(id, { timeoutMs: 20_000 });
    expect(view.session.state).toBe('COMPLETED');
    expect(view.tasks.map((t) => t.id)).toEqual(['only']);
    expect(decisions(await entries(c, id), 'terms:warning').at(-1)?.reason).toContain('認証');
  });

  it('approves on its own at approval.timeoutSeconds when onTimeout says approve', async () => {
    const { c, id, wait } = await waitingSession({
      config: { approval: { plan: 'required', timeoutSeconds: 1, onTimeout: 'approve' } },
    });
    expect(wait.onTimeout).toBe('approve');
    expect(wait.timeoutAt).toBeDefined();
    const view = await c.client.wait(id, { until: 'finished', timeoutMs: 20_000 });
    expect(view.session.state).toBe('COMPLETED');
    const all = await entries(c, id);
    expect(all.some((e) => e.type === 'wait' && e.action === 'timed-out')).toBe(true);
  });

  it('lets the timeout of a wait answered before it pass quietly, writing nothing', async () => {
    const { c, id } = await waitingSession({
      config: { approval: { plan: 'required', timeoutSeconds: 1 } },
    });
    await c.client.approve(id);
    expect((await c.client.wait(id, { timeoutMs: 20_000 })).session.state).toBe('COMPLETED');
    const before = await entries(c, id);
    // The delayed timeout event still fires, and the coordinator takes it.
    const coordinator = bullQueue(c.client.store.redis, c.prefix, 'coordinator');
    try {
      await eventually(
        async () =>
          (await coordinator.getJobState(jobIds.waitTimedOut(id, 'plan-0'))) === 'completed'
            ? true
            : undefined,
        'the timeout event taken',
        20_000,
      );
    } finally {
      await coordinator.close();
    }
    // Before, it wrote event:ignored ("the wait plan-0 is no longer open") after the end.
    expect(await entries(c, id)).toEqual(before);
  });

  it('fails the session at approval.timeoutSeconds by default', async () => {
    const { c, id } = await waitingSession({
      config: { approval: { plan: 'required', timeoutSeconds: 1 } },
    });
    const view = await c.client.wait(id, { until: 'finished', timeoutMs: 20_000 });
    expect(view.session.state).toBe('FAILED');
    expect(view.session.failure?.code).toBe('APPROVAL_TIMED_OUT');
    // An answer after the timeout is refused.
    expect((await refusal(c.client.approve(id))).code).toBe('WAIT_ENDED');
  });

  it('ends the wait when the session is cancelled', async () => {
    const { c, id } = await waitingSession();
    await c.client.cancel(id);
    const view = await c.client.wait(id, { timeoutMs: 20_000 });
    expect(view.session.state).toBe('CANCELLED');
    expect(view.session.wait).toBeUndefined();
    const all = await entries(c, id);
    expect(all.some((e) => e.type === 'wait' && e.action === 'cancelled')).toBe(true);
  });

  it('runs without a wait when approval is off (the default)', async () => {
    const c = await startCluster();
    const session = await c.client.submit({ instruction: INSTRUCTION });
    const view = await c.client.wait(session.id, { timeoutMs: 20_000 });
    expect(view.session.state).toBe('COMPLETED');
    expect((await entries(c, session.id)).some((e) => e.type === 'wait')).toBe(false);
  });
});
