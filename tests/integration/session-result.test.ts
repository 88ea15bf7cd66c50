import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SessionResult } from '../../src/shared/domain/result.js';
import { startCluster, type TestCluster } from '../support/cluster.js';
import { exampleScenario } from '../support/scenarios.js';

describe('client.result of sessions the roles run', () => {
  let cluster: TestCluster;
  beforeAll(async () => {
    cluster = await startCluster();
  }, 30_000);
  afterAll(async () => {
    await cluster?.close();
  });

  /** The output the session's task `id` stored. */
  const outputOf = async (sessionId: string, id: string) =>
    (await cluster.client.get(sessionId)).tasks.find((t) => t.id === id)?.result?.output;

  it("gives a completed session's final task's output, and its subtasks' for a replanned one", async () => {
    const { client } = cluster;
    const { id } = await client.submit({
      instruction: 'login with validation',
      config: { llm: { scenario: exampleScenario('replan-task.yaml') } },
    });
    expect((await client.wait(id, { timeoutMs: 30_000 })).session.state).toBe('COMPLETED');

    const result = await client.result(id);
    expect(SessionResult.parse(result)).toEqual(result);
    // t2 was replanned into t2-a then t2-b: the last subtask is what t2 would have given.
    expect(result).toMatchObject({ state: 'COMPLETED', complete: true, missing: [], notes: [] });
    expect(result.outputs.map((o) => o.taskId)).toEqual(['t2.r1.2']);
    const output = await outputOf(id, 't2.r1.2');
    expect(output).toBeTruthy();
    expect(result.text).toBe(output);
  });

  it('gives a blocked session what it did so far, then the whole result once it is resumed', async () => {
    const { client } = cluster;
    const { id } = await client.submit({
      instruction: 'deploy the service',
      config: { llm: { scenario: exampleScenario('blocked-task.yaml') } },
    });
    expect((await client.wait(id, { timeoutMs: 30_000 })).session.state).toBe('BLOCKED');

    // t1 → t2 (BLOCKED) → t3: t3 is the final task, and t1 the last work done before it.
    const blocked = await client.result(id);
    expect(blocked).toMatchObject({ state: 'BLOCKED', complete: false });
    expect(blocked.outputs).toEqual([
      expect.objectContaining({
        taskId: 't1',
        output: await outputOf(id, 't1'),
        standsInFor: ['t3'],
      }),
    ]);
    expect(blocked.missing).toEqual([expect.objectContaining({ taskId: 't3', state: 'READY' })]);
    expect(blocked.notes[0]).toBe(
      `Session ${id} is BLOCKED (1 of 3 tasks finished): t2 waits for a resume.`,
    );

    await client.resume(id, { mode: 'retry' });
    expect((await client.wait(id, { timeoutMs: 30_000 })).session.state).toBe('COMPLETED');
    const done = await client.result(id);
    expect(done).toMatchObject({ complete: true, missing: [], notes: [] });
    expect(done.outputs.map((o) => [o.taskId, o.output])).toEqual([
      ['t3', await outputOf(id, 't3')],
    ]);
  });

  it('follows the result settings the session was submitted with', async () => {
    const { client } = cluster;
    const { id } = await client.submit({
      instruction: 'deploy the service',
      config: {
        llm: { scenario: exampleScenario('diamond.yaml') },
        result: { tasks: 'done', maxTextLength: 100 },
      },
    });
    const view = await client.wait(id, { timeoutMs: 30_000 });
    expect(view.session.state).toBe('COMPLETED');

    const result = await client.result(id);
    expect(result.selection).toBe('done');
    expect(result.outputs.map((o) => o.taskId)).toEqual(view.tasks.map((t) => t.id));
    expect(result.textTruncated).toBe(true);
    expect(result.text).toMatch(/^## [\s\S]{97}\n\[… \d+ more characters\]$/);
  });
});

describe('client.result of a session that is not there or not done', () => {
  // No roles: a session stays PLANNING.
  let idle: TestCluster;
  beforeAll(async () => {
    idle = await startCluster({ pods: 0 });
  }, 30_000);
  afterAll(async () => {
    await idle?.close();
  });

  it('refuses a session still planning, saying its state and how to get the result so far', async () => {
    const { id } = await idle.client.submit({ instruction: 'not yet' });
    await expect(idle.client.result(id)).rejects.toMatchObject({
      code: 'INVALID_STATE',
      summary: `session ${id} is PLANNING: its result is not final yet (0 outputs so far)`,
      hint: expect.stringContaining(`orq result ${id} --partial`) as string,
      details: { sessionId: id, state: 'PLANNING' },
    });
    const partial = await idle.client.result(id, { partial: true });
    expect(partial).toMatchObject({ state: 'PLANNING', complete: false, outputs: [], text: '' });
    expect(partial.notes).toEqual([`Session ${id} is still planning: no task has run yet.`]);
  });

  it('answers NOT_FOUND for an unknown session, and names a bad option', async () => {
    await expect(idle.client.result('no-such-session')).rejects.toMatchObject({
      code: 'NOT_FOUND',
    });
    const { id } = await idle.client.submit({ instruction: 'options' });
    await expect(idle.client.result(id, { partial: 'yes' } as never)).rejects.toMatchObject({
      code: 'VALIDATION_FAILED',
      issues: [expect.objectContaining({ path: 'partial' })],
    });
  });
});
