import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import type { ScenarioInput } from '../../src/shared/config/scenario.js';
import { orq } from '../support/cli.js';
import { startCluster, type TestCluster } from '../support/cluster.js';
import { recordingModels } from '../support/scenarios.js';

// A person answering a blocked task's question from the CLI (issue 48): separate processes
// pointed at the roles, which run in this test process, through REDIS_URL and ORQ_PREFIX.

const QUESTION = 'Which registry should the image go to?';
const ASKS: ScenarioInput = {
  plans: [{ tasks: [{ id: 'push', title: 'Push the image', acceptance: 'pushed', context: 'c' }] }],
  planJudgements: [{ score: 90, isAcceptable: true }],
  tasks: {
    push: {
      results: [{ output: 'which one?' }, { output: 'pushed' }],
      judgements: [
        { success: false, reason: 'no registry given', question: QUESTION },
        { success: true, reason: 'pushed' },
      ],
    },
  },
};

let cluster: TestCluster;
let env: Record<string, string>;
const recorded = recordingModels(ASKS);
const cli = (...args: string[]) => orq(args, { env });

beforeAll(async () => {
  cluster = await startCluster({ models: recorded.models });
  env = { REDIS_URL: inject('redisUrl'), ORQ_PREFIX: cluster.prefix };
});
afterAll(async () => {
  await cluster?.close();
});

describe('questions from the CLI', () => {
  it('shows the question in status, lists the session as waiting, and answers it once', async () => {
    const { id } = await cluster.client.submit({ instruction: 'Push the image' });
    expect((await cluster.client.wait(id, { timeoutMs: 20_000 })).session.state).toBe('BLOCKED');

    const status = await cli('status', id);
    expect(status.stdout).toContain('waiting for a person: question question-push-1 of task push');
    expect(status.stdout).toContain(`question: ${QUESTION}`);
    expect(status.stdout).toContain(`orq answer ${id} --task push`);
    const list = await cli('status');
    expect(list.stdout).toMatch(
      new RegExp(`waiting for a person \\(\\d+\\):[\\s\\S]*${id}  question question-push-1`),
    );

    // Following the session, the CLI says what is asked and how to answer.
    const watched = await cli('watch', id);
    expect(watched.stderr).toContain(`push asks: ${QUESTION}`);
    expect(watched.stderr).toContain(`orq answer ${id} --task push TEXT`);

    const answered = await cli('answer', id, '--task', 'push', 'the staging registry');
    expect(answered.code, answered.stderr).toBe(0);
    expect(answered.stdout).toBe(`answered question-push-1 of ${id}\n`);
    const view = await cluster.client.wait(id, { timeoutMs: 20_000 });
    expect(view.session.state).toBe('COMPLETED');
    const second = recorded.calls.execute.find((r) => r.task.id === 'push' && r.attempt === 2);
    expect(second?.feedback).toContain('the staging registry');

    // Twice: the question has ended, and the CLI says so (WAIT_ENDED, exit 1).
    const again = await cli('answer', id, '--task', 'push', 'production');
    expect(again.code).toBe(1);
    expect(again.stderr).toContain('waits for nobody now');
    const history = await cli('history', id);
    expect(history.stdout).toContain(
      `waiting for a person: question (question-push-1): ${QUESTION}`,
    );
    expect(history.stdout).toContain(
      'question (question-push-1) answered: the staging registry by cli',
    );
  });
});
