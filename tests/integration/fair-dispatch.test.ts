import { Queue } from 'bullmq';
import { describe, expect, inject, it } from 'vitest';
import { bullPrefix } from '../../src/shared/queues.js';
import { tempFilesPerFile } from '../support/temp-files.js';
import { formatTenantLoad } from '../../src/producers/cli/format.js';
import type { SubmitRequest } from '../../src/producers/client.js';
import { createApiMetrics } from '../../src/producers/http/metrics.js';
import { silentLogger } from '../../src/shared/logger.js';
import type { RunningRoles } from '../../src/workers/registry.js';
import type { ScenarioInput } from '../../src/shared/config/scenario.js';
import type { RoleModels } from '../../src/workers/llm/types.js';
import { clusterPerTest } from '../support/cluster.js';
import { eventually, recordingModels } from '../support/scenarios.js';

const startCluster = clusterPerTest();
const TIMEOUT = 30_000;

const task = (id: string, dependencies: string[] = []) => ({
  id,
  title: id,
  acceptance: 'a',
  context: 'c',
  dependencies,
});

/** Roots A, B (alone), C → D → E and F → G: C's path is 3 tasks long, F's 2, A's and B's 1. */
const SEVEN: ScenarioInput = {
  plans: [
    {
      tasks: [
        task('A'),
        task('B'),
        task('C'),
        task('D', ['C']),
        task('E', ['D']),
        task('F'),
        task('G', ['F']),
      ],
    },
  ],
  planJudgements: [{ score: 90, isAcceptable: true }],
};

/**
 * SEVEN submitted with `request` to every role but the worker: what the coordinator dispatched
 * stays RUNNING, the rest READY. The view once the plan is accepted.
 */
async function acceptedWithoutWorkers(request: Omit<SubmitRequest, 'instruction'>) {
  const { models } = recordingModels(SEVEN);
  const cluster = await startCluster({
    models,
    roles: ['planner', 'judge', 'replanner', 'coordinator'],
  });
  const { id } = await cluster.client.submit({ instruction: 'seven tasks', ...request });
  const view = await eventually(async () => {
    const v = await cluster.client.get(id);
    return v.tasks.length === 7 && v.tasks.some((t) => t.state === 'RUNNING') ? v : undefined;
  }, 'plan accepted');
  return { cluster, view };
}

describe('a session with more ready tasks than slots (scheduling.maxTasksInFlight)', () => {
  it('dispatches only as many as its slots, the longest critical paths first', async () => {
    const { cluster, view } = await acceptedWithoutWorkers({
      tenant: 'acme',
      config: { scheduling: { maxTasksInFlight: 2 } },
    });
    const running = view.tasks.filter((t) => t.state === 'RUNNING').map((t) => t.id);
    expect(running.sort()).toEqual(['C', 'F']);
    expect(view.tasks.find((t) => t.id === 'C')?.criticalPath).toBe(3);
    expect(view.session).toMatchObject({ tenant: 'acme', priority: 5 });
    // Per tenant: C and F in flight, A and B waiting (D, E and G wait for dependencies).
    const tenants = await cluster.client.tenants();
    expect(tenants).toEqual([
      { tenant: 'acme', sessions: 1, tasksInFlight: 2, tasksWaiting: 2, jobsWaitingForQuota: 0 },
    ]);
    expect(formatTenantLoad(tenants).split('\n')).toEqual([
      'TENANT  SESSIONS  IN FLIGHT  WAITING  WAITING FOR QUOTA',
      'acme           1          2        2                  0',
    ]);
    const pod = cluster.pods[0] as RunningRoles;
    const metrics = createApiMetrics({
      redis: pod.store.redis,
      prefix: cluster.prefix,
      queues: pod.queues,
      logger: silentLogger,
    });
    const text = await metrics.registry.metrics();
    expect(text).toContain('orq_tenant_tasks{tenant="acme",state="in_flight"} 2');
    expect(text).toContain('orq_tenant_tasks{tenant="acme",state="waiting"} 2');
    expect(text).toContain('orq_tenant_tasks{tenant="acme",state="waiting_for_quota"} 0');
  });

  it('never has more tasks in flight than its slots, and runs every task to the end', async () => {
    let inFlight = 0;
    let most = 0;
    const order: string[] = [];
    const { models } = recordingModels(SEVEN, {
      beforeExecute: async (request) => {
        order.push(request.task.id);
        inFlight += 1;
        most = Math.max(most, inFlight);
        await new Promise((r) => setTimeout(r, 20));
        inFlight -= 1;
      },
    });
    const cluster = await startCluster({ models });
    const { id } = await cluster.client.submit({
      instruction: 'seven tasks',
      config: { scheduling: { maxTasksInFlight: 2 } },
    });
    const done = await cluster.client.wait(id, { timeoutMs: TIMEOUT });
    expect(done.session.state).toBe('COMPLETED');
    expect(order.slice(0, 2).sort()).toEqual(['C', 'F']);
    expect(order.sort()).toEqual(['A', 'B', 'C', 'D', 'E', 'F', 'G']);
    expect(most).toBeLessThanOrEqual(2);
  });

  it('without a limit (0) dispatches every ready task at once, as before', async () => {
    const { view } = await acceptedWithoutWorkers({
      config: { scheduling: { maxTasksInFlight: 0 } },
    });
    const running = view.tasks.filter((t) => t.state === 'RUNNING').map((t) => t.id);
    expect(running.sort()).toEqual(['A', 'B', 'C', 'F']);
  });
});

const temp = tempFilesPerFile('orq-fair-');

/** A scenario file whose plan is `n` independent tasks `<name>0`…, each call taking 5 ms. */
function plan(name: string, n: number): string {
  const scenario: ScenarioInput = {
    plans: [{ tasks: Array.from({ length: n }, (_, i) => task(`${name}${i}`)) }],
    planJudgements: [{ score: 90, isAcceptable: true }],
    latencyMs: 5,
  };
  return temp.write(`${name}.json`, JSON.stringify(scenario));
}

/** The work jobs in the order one worker ran them, as `<sessionId>` (or `<taskId>`) each. */
async function workOrder(
  prefix: string,
  url: string,
  field: 'sessionId' | 'taskId' = 'sessionId',
): Promise<string[]> {
  const queue = new Queue('work', { connection: { url }, prefix: bullPrefix(prefix) });
  try {
    const jobs = await queue.getJobs(['completed'], 0, -1);
    return jobs
      .sort((a, b) => (a.processedOn ?? 0) - (b.processedOn ?? 0))
      .map((j) => (j.data as Record<typeof field, string>)[field]);
  } finally {
    await queue.close();
  }
}

describe('a session’s queued work jobs', () => {
  it('run a task with a long chain behind it before the short ones released earlier', async () => {
    // P goes first (the longest path); while one worker runs P, then A…E, P's judgement
    // releases Z1, the head of a chain, behind five leaves.
    const scenario: ScenarioInput = {
      plans: [
        {
          tasks: [
            ...['A', 'B', 'C', 'D', 'E'].map((id) => task(id)),
            task('P'),
            task('Z1', ['P']),
            task('Z2', ['Z1']),
            task('Z3', ['Z2']),
          ],
        },
      ],
      planJudgements: [{ score: 90, isAcceptable: true }],
      latencyMs: 100,
    };
    const cluster = await startCluster({ roles: ['planner', 'judge', 'replanner', 'coordinator'] });
    const { id } = await cluster.client.submit({
      instruction: 'leaves and a chain',
      config: {
        llm: { scenario: temp.write('chain.json', JSON.stringify(scenario)) },
        scheduling: { maxTasksInFlight: 0 },
      },
    });
    await eventually(async () => {
      const v = await cluster.client.get(id);
      return v.tasks.filter((t) => t.state === 'RUNNING').length === 6 ? v : undefined;
    }, 'six roots queued');
    await cluster.startPod(['worker'], { concurrency: 1 });
    expect((await cluster.client.wait(id, { timeoutMs: TIMEOUT })).session.state).toBe('COMPLETED');
    const order = await workOrder(cluster.prefix, inject('redisUrl'), 'taskId');
    expect(order).toHaveLength(9);
    expect(order[0]).toBe('P');
    // Release order would run Z1 after every leaf (seventh); its path takes it ahead of the
    // leaves still queued when it is released.
    expect(order.indexOf('Z1')).toBeLessThan(5);
  });
});

describe('sessions behind another session’s backlog', () => {
  async function backlogThen(small: Record<string, unknown>): Promise<number[]> {
    // No worker at first: the big session's 30 work jobs queue up, then the small one's 2.
    const cluster = await startCluster({ roles: ['planner', 'judge', 'replanner', 'coordinator'] });
    const running = async (id: string, n: number) =>
      eventually(async () => {
        const v = await cluster.client.get(id);
        return v.tasks.filter((t) => t.state === 'RUNNING').length === n ? v : undefined;
      }, `${n} tasks queued`);
    const big = await cluster.client.submit({
      instruction: 'big',
      config: { llm: { scenario: plan('b', 30) } },
    });
    await running(big.id, 30);
    const late = await cluster.client.submit({
      instruction: 'small',
      config: { llm: { scenario: plan('s', 2) } },
      ...small,
    });
    await running(late.id, 2);
    await cluster.startPod(['worker'], { concurrency: 1 });
    for (const id of [big.id, late.id]) {
      expect((await cluster.client.wait(id, { timeoutMs: TIMEOUT })).session.state).toBe(
        'COMPLETED',
      );
    }
    const order = await workOrder(cluster.prefix, inject('redisUrl'));
    expect(order).toHaveLength(32);
    return order.flatMap((sessionId, i) => (sessionId === late.id ? [i] : []));
  }

  it('overtake it: the session that had no share yet runs next, not after 30 jobs', async () => {
    const positions = await backlogThen({});
    // First come, first served would run them 31st and 32nd (positions 30 and 31).
    expect(Math.max(...positions)).toBeLessThan(5);
  });

  it('of another tenant overtake it too', async () => {
    const positions = await backlogThen({ tenant: 'other' });
    expect(Math.max(...positions)).toBeLessThan(5);
  });

  it('with a higher priority run before every job of a lower one', async () => {
    const positions = await backlogThen({ priority: 9 });
    expect(positions).toEqual([0, 1]);
  });
});

describe('a session still planning', () => {
  it("counts for its tenant: another of the tenant's sessions released meanwhile takes half its share", async () => {
    const four: ScenarioInput = {
      plans: [{ tasks: ['a', 'b', 'c', 'd'].map((id) => task(id)) }],
      planJudgements: [{ score: 90, isAcceptable: true }],
    };
    const { models: inner } = recordingModels(four);
    let planning = false;
    let letPlan = () => {};
    const held = new Promise<void>((resolve) => (letPlan = resolve));
    const models: RoleModels = {
      ...inner,
      // The first session's planner waits until the test lets it go.
      async plan(request) {
        if (request.instruction === 'held') {
          planning = true;
          await held;
        }
        return inner.plan(request);
      },
    };
    // No worker: the released work jobs stay queued with their numbers. Two plans at once.
    const cluster = await startCluster({ pods: 0 });
    await cluster.startPod(['planner', 'judge', 'replanner', 'coordinator'], {
      concurrency: 2,
      models,
    });
    const queue = new Queue('work', {
      connection: { url: inject('redisUrl') },
      prefix: bullPrefix(cluster.prefix),
    });
    try {
      await cluster.client.submit({ instruction: 'held', tenant: 'acme' });
      await eventually(() => (planning ? true : undefined), 'the first session to be planning');
      const second = await cluster.client.submit({ instruction: 'second', tenant: 'acme' });
      const jobs = await eventually(async () => {
        const queued = await queue.getJobs(['prioritized', 'waiting']);
        return queued.length === 4 ? queued : undefined;
      }, "the second session's 4 work jobs");
      expect(jobs.every((j) => (j.data as { sessionId: string }).sessionId === second.id)).toBe(
        true,
      );
      // Two sessions of the tenant: each job costs the second one 2 places, not 1.
      const numbers = jobs.map((j) => j.opts.priority ?? 0).sort((a, b) => a - b);
      expect(numbers.slice(1).map((n, i) => n - (numbers[i] ?? 0))).toEqual([2, 2, 2]);
    } finally {
      letPlan();
      await queue.close();
    }
  });
});
