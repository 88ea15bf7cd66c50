import { existsSync, mkdtempSync, realpathSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { jobIds } from '../../src/shared/queues.js';
import { taskWorkspacePath } from '../../src/workers/executors/workspace-dir.js';
import {
  ONE_AGENT_TASK,
  submitAgentSession,
  toolResults,
  waitEntries,
} from '../support/agent-session.js';
import { clusterPerTest, type TestCluster } from '../support/cluster.js';
import { makeRepo } from '../support/git.js';
import { bullQueue } from '../support/pods.js';
import {
  decisions,
  eventually,
  executionsOf,
  historyOf,
  recordingModels,
} from '../support/scenarios.js';

/**
 * approval.stepTimeoutSeconds (issue 48): a wait inside a running execution that nobody answers
 * ends on its own. A step approval is decided as approval.onStepTimeout says, through the path a
 * person's answer takes; an agent's ask_human question gets no answer, and the agent goes on.
 */

const startCluster = clusterPerTest();
const TIMEOUT = 20_000;
const WRITE = { tool: 'write_file', input: { path: 'notes.txt', content: 'the notes' } };
const DONE = { done: true as const, summary: 'done' };
const FAKE_AGENT = fileURLToPath(new URL('../fixtures/fake-coding-agent.mjs', import.meta.url));
let tmp: string;
beforeAll(() => {
  tmp = realpathSync(mkdtempSync(join(tmpdir(), 'orq-step-timeouts-')));
});
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

/** A session whose agent writes notes.txt under a step rule, then finishes. */
async function writingUnderRule(approval: {
  stepTimeoutSeconds: number;
  onStepTimeout?: 'approve' | 'reject';
}) {
  const started = await submitAgentSession(startCluster, {
    actions: [WRITE, DONE],
    workspaces: tmp,
    approval: { steps: [{ tool: 'write_file' }], ...approval },
  });
  const { c, id, workspaceRoot } = started;
  const wait = await eventually(
    async () => (await c.client.get(id)).session.stepWaits?.[0],
    'the step wait',
  );
  const file = join(taskWorkspacePath(workspaceRoot, id, 'push'), 'notes.txt');
  return { ...started, wait, file };
}

/** Until the coordinator has taken the wait's timer event. */
async function timerTaken(c: TestCluster, id: string, waitId: string): Promise<void> {
  const coordinator = bullQueue(c.client.store.redis, c.prefix, 'coordinator');
  try {
    await eventually(
      async () =>
        (await coordinator.getJobState(jobIds.waitTimedOut(id, waitId))) === 'completed'
          ? true
          : undefined,
      'the timeout event taken',
      TIMEOUT,
    );
  } finally {
    await coordinator.close();
  }
}

describe('a step approval nobody answers (approval.stepTimeoutSeconds)', () => {
  it('is rejected by default: the agent gets the timed-out rejection as the tool result, and the session completes', async () => {
    const { c, id, wait, file } = await writingUnderRule({ stepTimeoutSeconds: 1 });
    expect(wait.onTimeout).toBe('reject');
    expect(Date.parse(wait.timeoutAt!) - Date.parse(wait.openedAt)).toBe(1_000);
    const done = await c.client.wait(id, { timeoutMs: TIMEOUT });
    expect(done.session.state).toBe('COMPLETED');
    expect(done.session.stepWaits).toBeUndefined();
    expect(existsSync(file)).toBe(false);
    const all = await historyOf(c.client, id);
    expect(toolResults(all, 'write_file').map((e) => e.error)).toEqual([
      'This step was rejected: nobody answered within 1 s (approval.onStepTimeout: reject). Do not run it again; find another way or finish.',
    ]);
    expect(waitEntries(all).map((e) => [e.action, e.answer?.action, e.by])).toEqual([
      ['opened', undefined, undefined],
      ['timed-out', 'reject', undefined],
    ]);
    expect(decisions(all, 'step-approval:reject').map((d) => d.reason)).toEqual([
      `step ${wait.step} of task push rejected on its timeout: nobody answered within 1 s (approval.onStepTimeout: reject); the executor hears why`,
    ]);
  });

  it('runs the step when approval.onStepTimeout says approve', async () => {
    const { c, id, wait, file } = await writingUnderRule({
      stepTimeoutSeconds: 1,
      onStepTimeout: 'approve',
    });
    expect(wait.onTimeout).toBe('approve');
    const done = await c.client.wait(id, { timeoutMs: TIMEOUT });
    expect(done.session.state).toBe('COMPLETED');
    expect(existsSync(file)).toBe(true);
    const all = await historyOf(c.client, id);
    expect(toolResults(all, 'write_file')).toEqual([
      expect.objectContaining({ output: expect.any(String) }),
    ]);
    expect(waitEntries(all).map((e) => [e.action, e.answer?.action])).toEqual([
      ['opened', undefined],
      ['timed-out', 'approve'],
    ]);
    expect(decisions(all, 'step-approval:approve')).toHaveLength(1);
  });

  it('refuses an answer that comes after the timeout with WAIT_ENDED', async () => {
    const { c, id, wait } = await writingUnderRule({ stepTimeoutSeconds: 1 });
    await eventually(
      async () =>
        waitEntries(await historyOf(c.client, id)).some((e) => e.action === 'timed-out')
          ? true
          : undefined,
      'the timeout',
      TIMEOUT,
    );
    await expect(c.client.approve(id, { waitId: wait.id })).rejects.toMatchObject({
      code: 'WAIT_ENDED',
    });
  });

  it('lets the timer of a step answered before it pass quietly, writing nothing', async () => {
    const { c, id, wait } = await writingUnderRule({ stepTimeoutSeconds: 2 });
    await c.client.approve(id, { waitId: wait.id, by: 'test' });
    expect((await c.client.wait(id, { timeoutMs: TIMEOUT })).session.state).toBe('COMPLETED');
    const before = await historyOf(c.client, id);
    await timerTaken(c, id, wait.id);
    expect(await historyOf(c.client, id)).toEqual(before);
    expect(waitEntries(before).map((e) => e.action)).toEqual(['opened', 'answered']);
  });
});

describe('an agent question nobody answers (approval.stepTimeoutSeconds)', () => {
  it('tells the agent no answer came, and it goes on', async () => {
    const { c, id } = await submitAgentSession(startCluster, {
      actions: [{ tool: 'ask_human', input: { question: 'Staging or production?' } }, DONE],
      workspaces: tmp,
      approval: { stepTimeoutSeconds: 1 },
    });
    const question = await eventually(
      async () => (await c.client.get(id)).session.questions?.[0],
      'the question',
    );
    expect(question.timeoutAt).toBeDefined();
    expect(question.onTimeout).toBeUndefined();
    const done = await c.client.wait(id, { timeoutMs: TIMEOUT });
    expect(done.session.state).toBe('COMPLETED');
    expect(done.session.questions).toBeUndefined();
    const all = await historyOf(c.client, id);
    expect(toolResults(all, 'ask_human').map((e) => e.output)).toEqual([
      'No answer: nobody answered within 1 s (approval.stepTimeoutSeconds). Go on without one.',
    ]);
    expect(waitEntries(all).map((e) => [e.action, e.answer])).toEqual([
      ['opened', undefined],
      ['timed-out', undefined],
    ]);
    expect(decisions(all, 'question:timed-out')).toHaveLength(1);
    await expect(c.client.answerQuestion(id, 'staging')).rejects.toMatchObject({
      code: 'WAIT_ENDED',
    });
  });
});

describe("a command executor's run nobody approves (approval.stepTimeoutSeconds)", () => {
  it('is not started, and the execution fails with the reason', async () => {
    const c = await startCluster({
      models: recordingModels(ONE_AGENT_TASK).models,
      config: {
        execution: {
          defaultExecutor: 'command',
          workspaceRoot: join(tmp, Math.random().toString(36).slice(2)),
          command: {
            template: [process.execPath, FAKE_AGENT, '{{prompt}}'],
            repository: makeRepo(tmp),
          },
        },
        approval: { steps: [{ command: 'fake-coding-agent' }], stepTimeoutSeconds: 1 },
      },
    });
    const { id } = await c.client.submit({ instruction: 'Push the image' });
    const execution = await eventually(
      async () => executionsOf(await historyOf(c.client, id), 'push')[0],
      'the execution',
      TIMEOUT,
    );
    expect(execution.result.error).toMatch(
      /^running `.*fake-coding-agent\.mjs" <prompt, \d+ chars>` was rejected: nobody answered within 1 s \(approval\.onStepTimeout: reject\)$/,
    );
    const all = await historyOf(c.client, id);
    expect(
      waitEntries(all)
        .slice(0, 2)
        .map((e) => [e.action, e.kind]),
    ).toEqual([
      ['opened', 'step-approval'],
      ['timed-out', 'step-approval'],
    ]);
  });
});
