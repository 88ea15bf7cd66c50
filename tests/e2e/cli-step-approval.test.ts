import { mkdtempSync, realpathSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import type { ScenarioInput } from '../../src/shared/config/scenario.js';
import { orq } from '../support/cli.js';
import { startCluster, type TestCluster } from '../support/cluster.js';
import { eventually, recordingModels } from '../support/scenarios.js';
import { createScriptedAgentModel } from '../../src/workers/executors/agent/scripted-model.js';

// A person approving a step of a running agent from the CLI (approval.steps, issue 48):
// separate processes pointed at the roles, which run in this test process.

const ONE_TASK: ScenarioInput = {
  plans: [{ tasks: [{ id: 't1', title: 'Write the notes', acceptance: 'written', context: 'c' }] }],
  planJudgements: [{ score: 90, isAcceptable: true }],
  tasks: { t1: { judgements: [{ success: true, reason: 'written' }] } },
};

let cluster: TestCluster;
let env: Record<string, string>;
let tmp: string;
const cli = (...args: string[]) => orq(args, { env });

beforeAll(async () => {
  tmp = realpathSync(mkdtempSync(join(tmpdir(), 'orq-cli-steps-')));
  cluster = await startCluster({
    models: recordingModels(ONE_TASK).models,
    config: {
      execution: { defaultExecutor: 'agent', workspaceRoot: tmp },
      approval: { steps: [{ tool: 'write_file' }] },
    },
  });
  env = { REDIS_URL: inject('redisUrl'), ORQ_PREFIX: cluster.prefix };
});
afterAll(async () => {
  await cluster?.close();
  rmSync(tmp, { recursive: true, force: true });
});

describe('step approval from the CLI', () => {
  it('shows the step in status, lists it as waiting, approves it once', async () => {
    const { id } = await cluster.client.submit({ instruction: 'Write the notes' });
    const wait = await eventually(
      async () => (await cluster.client.get(id)).session.stepWaits?.[0],
      'the step wait',
    );

    const status = await cli('status', id);
    expect(status.stdout).toContain(
      `waiting for a person: step approval ${wait.id} of task t1 (tool write_file)`,
    );
    expect(status.stdout).toContain('tool: write_file');
    expect(status.stdout).toContain('"path":"t1.md"');
    expect(status.stdout).toContain(`orq approve ${id} --wait ${wait.id}`);
    const list = await cli('status');
    expect(list.stdout).toMatch(
      new RegExp(`waiting for a person \\(\\d+\\):[\\s\\S]*${id}  step-approval ${wait.id}`),
    );

    const approved = await cli('approve', id, '--wait', wait.id);
    expect(approved.code, approved.stderr).toBe(0);
    expect(approved.stdout).toBe(`approved ${wait.id} of ${id}\n`);
    expect((await cluster.client.wait(id, { timeoutMs: 20_000 })).session.state).toBe('COMPLETED');

    const again = await cli('approve', id, '--wait', wait.id);
    expect(again.code).toBe(1);
    expect(again.stderr).toContain('waits for nobody now');
    const history = await cli('history', id);
    expect(history.stdout).toContain(
      `waiting for a person: step approval (${wait.id}): t1 would run write_file`,
    );
    expect(history.stdout).toContain(`step approval (${wait.id}) approved by cli`);
  });
});

describe("an agent's question from the CLI", () => {
  let asking: TestCluster;
  let askingEnv: Record<string, string>;
  beforeAll(async () => {
    const agent = createScriptedAgentModel({
      actions: [
        { tool: 'ask_human', input: { question: 'Staging or production?' } },
        { done: true, summary: 'pushed' },
      ],
    });
    asking = await startCluster({
      models: recordingModels(ONE_TASK).models,
      agentModel: () => agent,
      config: { execution: { defaultExecutor: 'agent', workspaceRoot: join(tmp, 'asking') } },
    });
    askingEnv = { REDIS_URL: inject('redisUrl'), ORQ_PREFIX: asking.prefix };
  });
  afterAll(async () => {
    await asking?.close();
  });

  it('shows the question in status and history, and orq answer resumes the run', async () => {
    const { id } = await asking.client.submit({ instruction: 'Write the notes' });
    const question = await eventually(
      async () => (await asking.client.get(id)).session.questions?.[0],
      'the question',
    );
    const status = await orq(['status', id], { env: askingEnv });
    expect(status.stdout).toContain(`waiting for a person: question ${question.id} of task t1`);
    expect(status.stdout).toContain('question: Staging or production?');
    const answered = await orq(['answer', id, '--task', 't1', 'staging'], { env: askingEnv });
    expect(answered.code, answered.stderr).toBe(0);
    expect(answered.stdout).toBe(`answered ${question.id} of ${id}\n`);
    expect((await asking.client.wait(id, { timeoutMs: 20_000 })).session.state).toBe('COMPLETED');
    const history = await orq(['history', id], { env: askingEnv });
    expect(history.stdout).toContain(
      `waiting for a person: question (${question.id}): Staging or production?`,
    );
    expect(history.stdout).toContain(`question (${question.id}) answered: staging by cli`);
  });
});
