import { mkdtempSync, readFileSync, realpathSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { HistoryEntry } from '../../src/shared/domain/history.js';
import type { StepApprovalWait } from '../../src/shared/domain/human-wait.js';
import type { ScenarioInput } from '../../src/shared/config/scenario.js';
import { jobIds, outboxJob } from '../../src/shared/queues.js';
import { UsageStore } from '../../src/shared/store/usage-store.js';
import { taskWorkspacePath } from '../../src/workers/executors/workspace-dir.js';
import { clusterPerTest } from '../support/cluster.js';
import { decisions, eventually, historyOf, recordingModels } from '../support/scenarios.js';

/**
 * Step approval through the library (issue 48): approval.steps names write_file, so the builtin
 * agent's write waits for a person. Its work job ends meanwhile; the answer resumes the same
 * execution (attempt 1) from its recorded steps.
 */

const startCluster = clusterPerTest();
const TIMEOUT = 20_000;
let tmp: string;
beforeAll(() => {
  tmp = realpathSync(mkdtempSync(join(tmpdir(), 'orq-step-approval-')));
});
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

const ONE_TASK: ScenarioInput = {
  plans: [
    { tasks: [{ id: 't1', title: 'Write the notes', acceptance: 'they exist', context: 'c' }] },
  ],
  planJudgements: [{ score: 90, isAcceptable: true }],
  tasks: { t1: { judgements: [{ success: true, reason: 'written' }] } },
};

async function waiting() {
  const { models } = recordingModels(ONE_TASK);
  const workspaceRoot = join(tmp, Math.random().toString(36).slice(2));
  const c = await startCluster({
    models,
    config: {
      execution: { defaultExecutor: 'agent', workspaceRoot },
      approval: { steps: [{ tool: 'write_file' }] },
    },
  });
  const session = await c.client.submit({ instruction: 'Write the notes' });
  const wait = await eventually(async () => {
    const { session: now } = await c.client.get(session.id);
    return now.stepWaits?.[0];
  }, 'the step wait');
  return { c, id: session.id, wait, workspaceRoot };
}

const waitEntries = (all: HistoryEntry[]) =>
  all.filter((e): e is Extract<HistoryEntry, { type: 'wait' }> => e.type === 'wait');

describe('step approval (approval.steps) with the agent executor', () => {
  it('opens a wait showing the exact tool input, with the task RUNNING and no work job left', async () => {
    const { c, id, wait } = await waiting();
    expect(wait).toEqual(
      expect.objectContaining<Partial<StepApprovalWait>>({
        id: `step-t1-1-${wait.step}`,
        kind: 'step-approval',
        taskId: 't1',
        attempt: 1,
        tool: 'write_file',
        input: expect.objectContaining({
          path: 't1.md',
          content: expect.stringContaining('Write the notes'),
        }),
        rule: 'tool write_file',
      }),
    );
    const view = await c.client.get(id);
    expect(view.session.state).toBe('RUNNING');
    expect(view.tasks.find((t) => t.id === 't1')).toMatchObject({ state: 'RUNNING', attempts: 1 });
    expect(await c.client.waiting()).toEqual([expect.objectContaining({ id })]);
    // Nothing of the session is queued or running: the work job ended.
    const counts = await c.pods[0]!.queues.get('work').getJobCounts(
      'active',
      'waiting',
      'delayed',
      'prioritized',
    );
    expect(Object.values(counts).reduce((a, b) => a + b, 0)).toBe(0);
    expect(waitEntries(await historyOf(c.client, id)).map((e) => [e.action, e.waitId])).toEqual([
      ['opened', wait.id],
    ]);
  });

  it('runs the approved step in the same execution, and the session completes; a second answer is WAIT_ENDED', async () => {
    const { c, id, wait, workspaceRoot } = await waiting();
    const outcome = await c.client.approve(id, { waitId: wait.id, by: 'test' });
    expect(outcome).toMatchObject({ waitId: wait.id, applied: true });
    const done = await c.client.wait(id, { timeoutMs: TIMEOUT });
    expect(done.session.state).toBe('COMPLETED');
    expect(done.session.stepWaits).toBeUndefined();
    expect(done.tasks.find((t) => t.id === 't1')).toMatchObject({
      state: 'DONE',
      attempts: 1,
      // Status views read the resumed execution's progress from its own job.
      resumedAfter: { attempt: 1, waitId: wait.id },
    });
    expect(
      readFileSync(join(taskWorkspacePath(workspaceRoot, id, 't1'), 't1.md'), 'utf8'),
    ).toContain('Write the notes');
    await expect(c.client.approve(id, { waitId: wait.id })).rejects.toMatchObject({
      code: 'WAIT_ENDED',
    });
    const all = await historyOf(c.client, id);
    expect(waitEntries(all).map((e) => [e.action, e.answer?.action, e.by])).toEqual([
      ['opened', undefined, undefined],
      ['answered', 'approve', 'test'],
    ]);
    expect(decisions(all, 'step-approval:approve')).toHaveLength(1);
    expect(await c.client.waiting()).toEqual([]);
  });

  it("shows the resumed execution's job as queued until a worker takes it", async () => {
    const { c, id, wait } = await waiting();
    // Only the worker role goes: the answer is applied, and its work job waits for a worker.
    await c.startPod(['planner', 'judge', 'replanner', 'coordinator']);
    await c.pods[0]!.close(5_000);
    c.pods.splice(0, 1);
    await c.client.approve(id, { waitId: wait.id });
    expect((await c.client.get(id)).queued).toEqual(['t1']);
    await c.startPod(['worker']);
    expect((await c.client.wait(id, { timeoutMs: TIMEOUT })).session.state).toBe('COMPLETED');
  });

  it('gives the agent the rejection and its reason; it asks again at a later step', async () => {
    const { c, id, wait } = await waiting();
    await c.client.reject(id, 'not that file', { by: 'test' });
    const next = await eventually(async () => {
      const now = (await c.client.get(id)).session.stepWaits?.[0];
      return now && now.id !== wait.id ? now : undefined;
    }, 'the next step wait');
    expect(next.step).toBeGreaterThan(wait.step);
    const all = await historyOf(c.client, id);
    const rejected = all.find(
      (e): e is Extract<HistoryEntry, { type: 'action' }> =>
        e.type === 'action' &&
        e.error?.includes('A person rejected this step (test): not that file') === true,
    );
    expect(rejected).toMatchObject({ tool: 'write_file', taskId: 't1' });
    expect((await c.client.get(id)).tasks[0]).toMatchObject({ state: 'RUNNING', attempts: 1 });
  });

  it('applies one of two answers given at once, and refuses the other with WAIT_ENDED', async () => {
    const { c, id, wait } = await waiting();
    const coordinator = c.pods[0]!;
    await coordinator.close(5_000);
    c.pods.splice(0, 1);
    const first = c.client.approve(id, { waitId: wait.id, waitMs: 15_000 });
    const second = c.client.reject(id, 'no', { waitId: wait.id, waitMs: 15_000 });
    await new Promise((r) => setTimeout(r, 500));
    await c.startPod();
    const outcomes = await Promise.allSettled([first, second]);
    expect(outcomes.filter((o) => o.status === 'fulfilled')).toHaveLength(1);
    const refused = outcomes.find((o) => o.status === 'rejected');
    expect((refused as PromiseRejectedResult).reason).toMatchObject({ code: 'WAIT_ENDED' });
    const answered = waitEntries(await historyOf(c.client, id)).filter(
      (e) => e.action === 'answered' && e.waitId === wait.id,
    );
    expect(answered).toHaveLength(1);
  });

  it('ends the wait when the session runs out of budget (its tasks are cancelled)', async () => {
    const { c, id, wait } = await waiting();
    // Another call of the session is refused its budget: the refusal marks the session, and
    // the failed job's event stops it.
    const usage = new UsageStore(c.client.store.redis, c.prefix);
    await usage.reserve(id, { tokens: 1_000_000, usdMicros: 0 }, { maxTokens: 10 }, 1_000);
    await c.pods[0]!.queues.add(
      outboxJob('coordinator', 'job-failed', jobIds.jobFailed('work', `budget-${id}`), {
        sessionId: id,
        role: 'worker',
        jobId: `budget-${id}`,
        error: 'the budget is exhausted',
        code: 'BUDGET_EXHAUSTED',
      }),
    );
    const view = await c.client.wait(id, { timeoutMs: TIMEOUT, until: 'finished' });
    expect(view.session.state).toBe('BUDGET_EXHAUSTED');
    expect(view.session.stepWaits).toBeUndefined();
    expect(waitEntries(await historyOf(c.client, id)).map((e) => [e.action, e.waitId])).toEqual([
      ['opened', wait.id],
      ['cancelled', wait.id],
    ]);
    expect(await c.client.waiting()).toEqual([]);
  });

  it('ends the wait when the session is cancelled', async () => {
    const { c, id, wait } = await waiting();
    await c.client.cancel(id);
    const view = await c.client.wait(id, { timeoutMs: TIMEOUT, until: 'finished' });
    expect(view.session.state).toBe('CANCELLED');
    expect(view.session.stepWaits).toBeUndefined();
    expect(waitEntries(await historyOf(c.client, id)).map((e) => [e.action, e.waitId])).toEqual([
      ['opened', wait.id],
      ['cancelled', wait.id],
    ]);
    await expect(c.client.approve(id)).rejects.toMatchObject({ code: 'WAIT_ENDED' });
  });
});
