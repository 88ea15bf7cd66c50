import { mkdtempSync, realpathSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { StepDecision } from '../../src/shared/domain/human-wait.js';
import { createCommandExecutor } from '../../src/workers/executors/command.js';
import { taskBranchName } from '../../src/workers/executors/git-worktree.js';
import { ExecutionPaused } from '../../src/workers/executors/types.js';
import { executorContext, makeSession, openStore } from '../support/executors.js';
import { git, makeRepo } from '../support/git.js';

/**
 * approval.steps with the command executor (issue 48): a command run matching a rule waits
 * before its process starts; approved, it runs; rejected, the result says so with the reason.
 */

const FAKE_AGENT = fileURLToPath(new URL('../fixtures/fake-coding-agent.mjs', import.meta.url));

let tmp: string;
let db: ReturnType<typeof openStore>;
beforeAll(() => {
  tmp = realpathSync(mkdtempSync(join(tmpdir(), 'orq-command-steps-')));
  db = openStore();
});
afterAll(() => {
  db.close();
  rmSync(tmp, { recursive: true, force: true });
});

function setup(rule = 'fake-coding-agent') {
  const repo = makeRepo(tmp);
  const session = makeSession({
    execution: {
      defaultExecutor: 'command',
      workspaceRoot: join(tmp, 'ws'),
      command: { template: [process.execPath, FAKE_AGENT, '{{prompt}}'], repository: repo },
    },
    approval: { steps: [{ command: rule }] },
  });
  const task = { id: 't1', title: 'Write the parser', acceptance: 'the parser exists' };
  const deliver = (decision?: StepDecision) => ({
    ...executorContext(db.store, session, task),
    ...(decision ? { stepDecision: decision } : {}),
  });
  return { repo, deliver, branch: taskBranchName(session.id, 't1') };
}

async function paused(run: Promise<unknown>): Promise<ExecutionPaused> {
  const error = await run.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(ExecutionPaused);
  return error as ExecutionPaused;
}

describe('the command executor under approval.steps', () => {
  it('waits before the process starts, showing the command, and asks again until decided', async () => {
    const { repo, deliver, branch } = setup();
    const executor = createCommandExecutor();
    const wait = await paused(executor.execute(deliver()));
    expect(wait.request).toMatchObject({
      kind: 'step-approval',
      step: 0,
      tool: 'command',
      command: expect.stringMatching(/fake-coding-agent\.mjs" <prompt, \d+ chars>$/),
      input: { round: 1, argv: [process.execPath, FAKE_AGENT, expect.any(String)] },
      rule: 'command matches /fake-coding-agent/',
    });
    // The agent did not run: the task branch holds nothing of it.
    expect(git(['rev-list', '--count', `HEAD..${branch}`], repo)).toBe('0');
    expect((await paused(executor.execute(deliver()))).request).toEqual(wait.request);
  });

  it('runs the approved command', async () => {
    const { repo, deliver, branch } = setup();
    const executor = createCommandExecutor();
    await paused(executor.execute(deliver()));
    const result = await executor.execute(
      deliver({ waitId: 'step-t1-1-0', step: 0, action: 'approve', by: 'cli' }),
    );
    expect(result.error).toBeUndefined();
    expect(git(['show', `${branch}:t1.txt`], repo)).toBe('t1: Write the parser');
  });

  it('reports a rejection with its reason as the failed result, without running the command', async () => {
    const { repo, deliver, branch } = setup();
    const executor = createCommandExecutor();
    await paused(executor.execute(deliver()));
    const result = await executor.execute(
      deliver({ waitId: 'step-t1-1-0', step: 0, action: 'reject', text: 'not today', by: 'cli' }),
    );
    expect(result.error).toMatch(/^a person rejected running `.*` by cli: not today$/);
    expect(result.output).toMatch(/^Agent not run on branch /);
    expect(git(['ls-tree', '--name-only', branch], repo)).not.toContain('t1.txt');
  });

  it('runs a command no rule matches at once', async () => {
    const { deliver } = setup('^never$');
    const result = await createCommandExecutor().execute(deliver());
    expect(result.error).toBeUndefined();
  });
});
