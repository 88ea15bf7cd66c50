import { afterAll, afterEach, describe, expect, it } from 'vitest';
import type { HistoryEntry } from '../../src/shared/domain/history.js';
import { jobIds } from '../../src/shared/queues.js';
import {
  expectNoRoleJobs,
  readWhenBack,
  startKillCluster,
  type KillCluster,
} from '../support/kill-cluster.js';
import { bullQueue } from '../support/pods.js';
import { historyOf, scenarioDir } from '../support/scenarios.js';
import { ASKS, QUESTION } from '../support/question-scenario.js';

// A question (issue 48) is a record on the session beside a BLOCKED task: nothing of it lives in
// a pod. kill -9 of the coordinator and of the worker pods while it is open, and a Redis restart
// with AOF, lose neither the question nor an answer queued while no coordinator ran.

const scenarios = scenarioDir();
let cluster: KillCluster | undefined;
afterEach(async () => {
  await cluster?.close();
  cluster = undefined;
});
afterAll(() => scenarios.cleanup());

const waitEntries = (all: HistoryEntry[]) =>
  all.filter((e): e is Extract<HistoryEntry, { type: 'wait' }> => e.type === 'wait');

describe('an open question across kill -9 of every pod and a Redis restart', () => {
  it('is still open and listed afterwards; one of two answers runs the task with it, once, and a late one is refused', async () => {
    cluster = await startKillCluster('question-kill');
    const { client: c, pods: p } = cluster;
    const { id } = await c.submit({
      instruction: 'Build and push the image',
      config: { llm: { scenario: scenarios.write('asks', ASKS) } },
    });
    const before = await c.wait(id, { timeoutMs: 30_000 });
    expect(before.session.state).toBe('BLOCKED');
    expect(before.session.questions).toEqual([
      expect.objectContaining({ id: 'question-t2-1', taskId: 't2', question: QUESTION }),
    ]);
    await expectNoRoleJobs(cluster);

    await p.stopAll('SIGKILL');
    await cluster.restartRedis();
    const after = await readWhenBack(c, id);
    expect(after.session.state).toBe('BLOCKED');
    expect(after.session.questions).toEqual(before.session.questions);
    expect(after.tasks.find((t) => t.id === 't2')?.state).toBe('BLOCKED');
    expect((await c.waiting()).map((s) => [s.id, s.questions?.map((q) => q.id)])).toEqual([
      [id, ['question-t2-1']],
    ]);

    // Two answers while no coordinator runs: both are queued, the next coordinator applies one.
    const answers = Promise.allSettled([
      c.answerQuestion(id, 'staging, please', { taskId: 't2', waitMs: 60_000 }),
      c.answerQuestion(id, 'production', { taskId: 't2', waitMs: 60_000 }),
    ]);
    await cluster.startPods();
    const outcomes = await answers;
    const applied = outcomes.filter((o) => o.status === 'fulfilled');
    expect(applied).toEqual([
      { status: 'fulfilled', value: expect.objectContaining({ applied: true }) },
    ]);
    const refused = outcomes.find((o) => o.status === 'rejected');
    expect(refused?.reason).toMatchObject({ code: 'WAIT_ENDED' });
    const text = outcomes[0]!.status === 'fulfilled' ? 'staging, please' : 'production';

    const done = await c.wait(id, { timeoutMs: 30_000 });
    expect(done.session.state).toBe('COMPLETED');
    expect(done.session.questions).toBeUndefined();
    // The worker ran t2 again with the question and the answer as its feedback.
    const work = bullQueue(c.store.redis, cluster.prefix, 'work');
    try {
      const again = await work.getJob(jobIds.execute(id, 't2', 2));
      expect(again?.data.task.feedback).toContain(QUESTION);
      expect(again?.data.task.feedback).toContain(text);
    } finally {
      await work.close();
    }

    await expect(c.answerQuestion(id, 'too late', { taskId: 't2' })).rejects.toMatchObject({
      code: 'WAIT_ENDED',
    });
    expect(waitEntries(await historyOf(c, id)).map((e) => [e.action, e.answer])).toEqual([
      ['opened', undefined],
      ['answered', { action: 'answer', text }],
    ]);
    expect(await c.waiting()).toEqual([]);
  });
});
