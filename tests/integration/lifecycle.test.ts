import { describe, expect, it } from 'vitest';
import type { HistoryEntry } from '../../src/shared/domain/history.js';
import { parseSseStream } from '../../src/producers/http/sse.js';
import { jobIds } from '../../src/shared/queues.js';
import { settlesWithin } from '../../src/shared/settles-within.js';
import { clusterPerTest, type TestCluster } from '../support/cluster.js';
import { bullQueue } from '../support/pods.js';
import { exampleScenario } from '../support/scenarios.js';
import { serveApi } from '../support/http.js';

let cluster: TestCluster | undefined;
const startCluster = clusterPerTest();

describe('a session end to end with the builtin provider', () => {
  it('plans, runs every task and completes', async () => {
    cluster = await startCluster();
    const session = await cluster.client.submit({
      instruction: '認証機能とバリデーションを実装して',
    });
    const view = await cluster.client.wait(session.id, { timeoutMs: 20_000 });
    expect(view.session.state).toBe('COMPLETED');
    expect(view.tasks.length).toBeGreaterThanOrEqual(2);
    expect(view.tasks.every((t) => t.state === 'DONE')).toBe(true);
    expect(view.counters).toEqual({ open: 0, active: 0 });
  });
});

describe('resume then wait', () => {
  it('sees the resumed session, not the BLOCKED state from before the resume', async () => {
    cluster = await startCluster({ roles: ['planner', 'judge', 'worker', 'replanner'] });
    const coordinator = await cluster.startPod(['coordinator']);
    const scenario = new URL('../../examples/scenarios/blocked-task.yaml', import.meta.url)
      .pathname;
    const session = await cluster.client.submit({
      instruction: 'blocked then fixed',
      config: { llm: { scenario } },
    });
    const blocked = await cluster.client.wait(session.id, { timeoutMs: 20_000 });
    expect(blocked.session.state).toBe('BLOCKED');

    // The coordinator is away when the resume is requested and back a moment later: a resume
    // that returned before the coordinator applied it would leave `wait` looking at BLOCKED.
    await coordinator.close(5_000);
    const c = cluster;
    const back = new Promise((r) => setTimeout(r, 1_000)).then(() => c.startPod(['coordinator']));
    await cluster.client.resume(session.id, { mode: 'retry' });
    const view = await cluster.client.wait(session.id, { timeoutMs: 20_000 });
    await back;
    expect(view.session.state).toBe('COMPLETED');
  });
});

describe('a resume the coordinator has not applied yet', () => {
  /** A BLOCKED session of the blocked-task scenario, on roles without a coordinator. */
  async function blockedWithoutCoordinator() {
    const c = await startCluster({ roles: ['planner', 'judge', 'worker', 'replanner'] });
    cluster = c;
    const coordinator = await c.startPod(['coordinator']);
    const session = await c.client.submit({
      instruction: 'blocked then fixed',
      config: { llm: { scenario: exampleScenario('blocked-task.yaml') } },
    });
    const blocked = await c.client.wait(session.id, { timeoutMs: 20_000 });
    expect(blocked.session.state).toBe('BLOCKED');
    await coordinator.close(5_000);
    return { c, sessionId: session.id };
  }

  it('keeps watch and wait going at BLOCKED until the coordinator applies it, then ends with the session', async () => {
    const { c, sessionId } = await blockedWithoutCoordinator();
    // The resume returns before the coordinator applies it (as after its 5 s wait).
    await c.client.resume(sessionId, { mode: 'retry' }, { waitMs: 0 });

    const waited = c.client.wait(sessionId, { timeoutMs: 30_000 });
    const watched = (async () => {
      const entries: HistoryEntry[] = [];
      for await (const { entry } of c.client.watch(sessionId, { until: 'settled', blockMs: 200 })) {
        entries.push(entry);
      }
      return entries;
    })();
    // Several re-checks of the session: each sees it BLOCKED, with the resume pending.
    expect(await settlesWithin(waited, 1_500)).toBe(false);
    expect(await settlesWithin(watched, 100)).toBe(false);

    await c.startPod(['coordinator']);
    const view = await waited;
    expect(view.session.state).toBe('COMPLETED');
    expect((await watched).at(-1)).toMatchObject({ type: 'state_change', to: 'COMPLETED' });
  });

  it('keeps wait and the event stream of a budget-stopped session going until its resume is applied', async () => {
    const c = await startCluster({ roles: ['planner', 'judge', 'worker', 'replanner'] });
    cluster = c;
    const coordinator = await c.startPod(['coordinator']);
    const session = await c.client.submit({
      instruction: 'Run the four steps',
      config: {
        llm: { scenario: exampleScenario('budget-stop.yaml') },
        budget: { maxTokens: 2500, reserveTokensPerCall: 600 },
      },
    });
    const stopped = await c.client.wait(session.id, { timeoutMs: 20_000 });
    expect(stopped.session.state).toBe('BUDGET_EXHAUSTED');
    await coordinator.close(5_000);
    await c.client.resume(session.id, { budget: { maxTokens: 100_000 } }, { waitMs: 0 });

    const server = await serveApi(c.client);
    try {
      // BUDGET_EXHAUSTED is a finished state: `until: 'finished'` ended there at once.
      const waited = c.client.wait(session.id, { until: 'finished', timeoutMs: 30_000 });
      const streamed = fetch(`${server.url}/sessions/${session.id}/events`).then(async (res) =>
        parseSseStream(await res.text()),
      );
      expect(await settlesWithin(waited, 1_500)).toBe(false);
      expect(await settlesWithin(streamed, 100)).toBe(false);

      await c.startPod(['coordinator']);
      expect((await waited).session.state).toBe('COMPLETED');
      const end = (await streamed).at(-1);
      expect(end?.event).toBe('end');
      expect(JSON.parse(end?.data ?? '{}')).toMatchObject({ state: 'COMPLETED' });
    } finally {
      await server.close();
    }
  });

  it('does not count a resume queued before the session ended another way: nothing moves it on', async () => {
    const { c, sessionId } = await blockedWithoutCoordinator();
    await c.client.resume(sessionId, { mode: 'retry' }, { waitMs: 0 });
    expect(await c.client.resumePending(sessionId)).toBe(true);
    // As if a cancel was applied first (its job ran before the resume's): the coordinator
    // ignores a resume of a CANCELLED session, so a watch must not wait for it.
    await c.client.store.redis.hset(c.client.store.keys(sessionId).meta, 'state', 'CANCELLED');
    expect(await c.client.resumePending(sessionId)).toBe(false);
    // No coordinator runs to take the resume's job off the queue: a wait must end anyway.
    const waited = c.client.wait(sessionId, { until: 'finished', timeoutMs: 10_000 });
    expect(await settlesWithin(waited, 5_000)).toBe(true);
    await waited;
  });

  it('ends watch and wait at BLOCKED when its job is gone, since nothing will apply it', async () => {
    const { c, sessionId } = await blockedWithoutCoordinator();
    const requestId = await c.client.resume(sessionId, { mode: 'retry' }, { waitMs: 0 });
    expect(await c.client.resumePending(sessionId)).toBe(true);
    const queue = bullQueue(c.client.store.redis, c.prefix, 'coordinator');
    try {
      await queue.remove(jobIds.resume(sessionId, requestId));
    } finally {
      await queue.close();
    }
    expect(await c.client.resumePending(sessionId)).toBe(false);
    const view = await c.client.wait(sessionId, { timeoutMs: 5_000 });
    expect(view.session.state).toBe('BLOCKED');
  });
});
