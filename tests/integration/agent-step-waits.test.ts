import { existsSync, mkdtempSync, readFileSync, realpathSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { HistoryEntry } from '../../src/shared/domain/history.js';
import type { StepDecision } from '../../src/shared/domain/human-wait.js';
import { createAgentExecutor } from '../../src/workers/executors/agent/executor.js';
import {
  createScriptedAgentModel,
  type AgentScript,
} from '../../src/workers/executors/agent/scripted-model.js';
import { ExecutionPaused } from '../../src/workers/executors/types.js';
import { taskWorkspacePath } from '../../src/workers/executors/workspace-dir.js';
import { executorContext, historyOf, makeSession, openStore } from '../support/executors.js';

/**
 * The agent executor's side of waits inside an execution (issue 48): a step approval.steps
 * names, and ask_human. The run records the step and stops (ExecutionPaused); a later delivery
 * of the same execution, given the person's decision, resumes from the journal.
 */

let tmp: string;
let db: ReturnType<typeof openStore>;
beforeAll(() => {
  tmp = realpathSync(mkdtempSync(join(tmpdir(), 'orq-steps-')));
  db = openStore();
});
afterAll(() => {
  db.close();
  rmSync(tmp, { recursive: true, force: true });
});

const task = { id: 't1', title: 'Write the notes', acceptance: 'notes.txt holds the notes' };
const WRITE = { tool: 'write_file', input: { path: 'notes.txt', content: 'the notes' } };

function setup(script: AgentScript, askHuman = true) {
  const session = makeSession({
    execution: { workspaceRoot: join(tmp, 'ws'), askHuman },
    approval: { steps: [{ tool: 'write_file' }] },
    planning: { enabled: false },
  });
  const model = createScriptedAgentModel(script);
  const executor = createAgentExecutor({ model: () => model });
  const deliver = (decision?: StepDecision) => ({
    ...executorContext(db.store, session, task),
    ...(decision ? { stepDecision: decision } : {}),
  });
  const file = join(taskWorkspacePath(join(tmp, 'ws'), session.id, 't1'), 'notes.txt');
  return { session, model, executor, deliver, file };
}

async function paused(run: Promise<unknown>): Promise<ExecutionPaused> {
  const error = await run.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(ExecutionPaused);
  return error as ExecutionPaused;
}

const actions = (entries: HistoryEntry[]) =>
  entries.filter((e): e is Extract<HistoryEntry, { type: 'action' }> => e.type === 'action');

describe('a step that waits for a person, in the agent executor', () => {
  it('stops before the call runs, recording the exact input, and asks for the same wait again until decided', async () => {
    const { session, executor, deliver, file } = setup({
      actions: [{ tool: 'list_files', input: { path: '.' } }, WRITE],
    });
    const first = await paused(executor.execute(deliver()));
    expect(first.request).toEqual({
      kind: 'step-approval',
      step: 1,
      tool: 'write_file',
      input: WRITE.input,
      rule: 'tool write_file',
    });
    expect(existsSync(file)).toBe(false);
    // A redelivery without a decision (the wait not yet opened) asks for the same wait.
    const again = await paused(executor.execute(deliver()));
    expect(again.request).toEqual(first.request);
    const recorded = actions(await historyOf(db.store, session.id));
    expect(recorded.map((a) => [a.tool, a.awaiting])).toEqual([
      ['list_files', undefined],
      ['write_file', 'step-approval'],
    ]);
  });

  it('runs the approved call from the journal, without asking the model again, and goes on', async () => {
    const { session, model, executor, deliver, file } = setup({
      actions: [WRITE, { done: true, summary: 'written' }],
    });
    await paused(executor.execute(deliver()));
    const asked = model.calls.nextAction;
    const result = await executor.execute(
      deliver({ waitId: 'step-t1-1-0', step: 0, action: 'approve', by: 'cli' }),
    );
    expect(result.error).toBeUndefined();
    expect(result.output).toBe('written');
    expect(readFileSync(file, 'utf8')).toBe('the notes');
    // One more call: the one after the approved step (done), not the approved step again.
    expect(model.calls.nextAction).toBe(asked + 1);
    const recorded = actions(await historyOf(db.store, session.id));
    expect(recorded.map((a) => [a.tool, a.awaiting, a.output])).toEqual([
      ['write_file', 'step-approval', undefined],
      ['write_file', undefined, expect.stringContaining('notes.txt')],
    ]);
  });

  it('gives the model the rejection and its reason as the call result', async () => {
    const { executor, deliver, file, model } = setup({
      actions: [WRITE, { done: true, summary: 'gave up writing' }],
    });
    await paused(executor.execute(deliver()));
    const result = await executor.execute(
      deliver({
        waitId: 'step-t1-1-0',
        step: 0,
        action: 'reject',
        text: 'not in this repo',
        by: 'cli',
      }),
    );
    expect(existsSync(file)).toBe(false);
    expect(result.output).toBe('gave up writing');
    expect(result.log).toMatch(
      /write_file .* error: A person rejected this step \(cli\): not in this repo/,
    );
    expect(model.calls.nextAction).toBe(2);
  });
});

describe('a run_command rule, in the agent executor', () => {
  it('stops a git push (argv) before it starts, showing its command line; other commands run', async () => {
    const session = makeSession({
      execution: { workspaceRoot: join(tmp, 'ws') },
      approval: { steps: [{ tool: 'run_command', match: '^git push' }] },
      planning: { enabled: false },
    });
    const model = createScriptedAgentModel({
      actions: [
        { tool: 'run_command', input: { command: [process.execPath, '-e', '1'] } },
        { tool: 'run_command', input: { command: ['git', 'push', 'origin', 'main'] } },
      ],
    });
    const executor = createAgentExecutor({ model: () => model });
    const wait = await paused(executor.execute(executorContext(db.store, session, task)));
    expect(wait.request).toEqual({
      kind: 'step-approval',
      step: 1,
      tool: 'run_command',
      input: { command: ['git', 'push', 'origin', 'main'] },
      command: 'git push origin main',
      rule: 'tool run_command with input matching /^git push/',
    });
  });
});

describe('ask_human, in the agent executor', () => {
  it('stops with the question, and the answer comes back as the tool result', async () => {
    const { session, executor, deliver } = setup({
      actions: [
        { tool: 'ask_human', input: { question: 'Staging or production?' } },
        { done: true, summary: 'pushed to staging' },
      ],
    });
    const ask = await paused(executor.execute(deliver()));
    expect(ask.request).toEqual({ kind: 'question', step: 0, question: 'Staging or production?' });
    const result = await executor.execute(
      deliver({ waitId: 'ask-t1-1-0', step: 0, action: 'answer', text: 'staging', by: 'cli' }),
    );
    expect(result.output).toBe('pushed to staging');
    const recorded = actions(await historyOf(db.store, session.id));
    expect(recorded.at(-1)).toEqual(
      expect.objectContaining({ tool: 'ask_human', output: 'A person answered (cli): staging' }),
    );
  });

  it('tells the model when ask_human has no question, without stopping', async () => {
    const { executor, deliver } = setup({
      actions: [
        { tool: 'ask_human', input: {} },
        { done: true, summary: 'went on' },
      ],
    });
    const result = await executor.execute(deliver());
    expect(result.output).toBe('went on');
    expect(result.log).toMatch(/ask_human .* error: ask_human takes/);
  });

  it('is not offered with execution.askHuman false: a call is an unknown tool', async () => {
    let offered: string[] = [];
    const { executor, deliver, model } = setup(
      {
        actions: [
          { tool: 'ask_human', input: { question: 'Anyone?' } },
          { done: true, summary: 'went on alone' },
        ],
      },
      false,
    );
    const nextAction = model.nextAction.bind(model);
    model.nextAction = (request) => {
      offered = request.tools.map((t) => t.name);
      return nextAction(request);
    };
    const result = await executor.execute(deliver());
    expect(offered).not.toContain('ask_human');
    expect(result.output).toBe('went on alone');
    expect(result.log).toMatch(/ask_human .* error: unknown tool "ask_human"/);
  });
});
