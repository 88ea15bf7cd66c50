import { Queue, type Job } from 'bullmq';
import { describe, expect, inject, it } from 'vitest';
import { bullPrefix } from '../../src/shared/queues.js';
import { createConnection } from '../../src/shared/redis.js';
import { silentLogger } from '../../src/shared/logger.js';
import { TenantSlots } from '../../src/shared/store/tenant-slots.js';
import type { ScenarioInput } from '../../src/shared/config/scenario.js';
import { tenantCap, withTenantCap } from '../../src/workers/tenant-cap.js';
import { DeliveryLostError } from '../../src/workers/delivery.js';
import { TenantsConfig } from '../../src/shared/config/schema.js';
import { formatTenantLoad } from '../../src/producers/cli/format.js';
import { createApiMetrics } from '../../src/producers/http/metrics.js';
import { clusterPerTest } from '../support/cluster.js';
import { eventually, recordingModels } from '../support/scenarios.js';

const startCluster = clusterPerTest();
const TIMEOUT = 60_000;

const FOUR: ScenarioInput = {
  plans: [
    {
      tasks: ['T1', 'T2', 'T3', 'T4'].map((id) => ({
        id,
        title: id,
        acceptance: 'a',
        context: 'c',
      })),
    },
  ],
  planJudgements: [{ score: 90, isAcceptable: true }],
};

describe('tenants.caps: a cap on the work jobs of one tenant running at once', () => {
  it("runs at most one of tenant A's tasks at a time while B's proceed; each task once, no attempt spent", async () => {
    const tenantOf = new Map<string, string>();
    const running: Record<string, number> = { A: 0, B: 0 };
    const most: Record<string, number> = { A: 0, B: 0 };
    const { models, calls } = recordingModels(FOUR, {
      beforeExecute: async (request) => {
        const tenant = tenantOf.get(request.sessionId) ?? '?';
        running[tenant] = (running[tenant] ?? 0) + 1;
        most[tenant] = Math.max(most[tenant] ?? 0, running[tenant]);
        // A's tasks outlast their slot's lease (1.5 s): only its renewal keeps the others out.
        await new Promise((r) => setTimeout(r, tenant === 'A' ? 2_000 : 300));
        running[tenant] = (running[tenant] ?? 0) - 1;
      },
    });
    const cluster = await startCluster({
      models,
      roles: ['planner', 'judge', 'replanner', 'coordinator'],
      config: {
        tenants: { caps: { A: { maxTasksInFlight: 1 } } },
        queues: { lockDurationMs: 1_500 },
      },
    });
    // Two worker pods, two jobs at once each.
    await cluster.startPod(['worker'], { concurrency: 2 });
    await cluster.startPod(['worker'], { concurrency: 2 });
    const a = await cluster.client.submit({ instruction: 'a', tenant: 'A' });
    tenantOf.set(a.id, 'A');
    const b = await cluster.client.submit({ instruction: 'b', tenant: 'B' });
    tenantOf.set(b.id, 'B');

    // Meanwhile A's waiting jobs sit in the work queue as delayed, saying why.
    const url = inject('redisUrl');
    const queue = new Queue('work', { connection: { url }, prefix: bullPrefix(cluster.prefix) });
    try {
      const waiting = await eventually(async () => {
        const delayed = await queue.getDelayed();
        return delayed.find((job) => (job.data as { tenant?: string }).tenant === 'A');
      }, 'a job of A handed back');
      expect(waiting.progress).toMatchObject({ activity: 'waiting for a tenant slot (A)' });
      // The tenant view shows A's cap and its jobs waiting for a slot; B has no cap.
      const view = await eventually(async () => {
        const tenants = await cluster.client.tenants();
        const capped = tenants.find((t) => t.tenant === 'A');
        return (capped?.tasksWaitingForSlot ?? 0) > 0 ? tenants : undefined;
      }, 'A waiting for its cap in the tenant view');
      expect(view.find((t) => t.tenant === 'A')).toMatchObject({ maxTasksInFlight: 1 });
      const viewB = view.find((t) => t.tenant === 'B');
      expect(viewB === undefined || viewB.maxTasksInFlight === undefined).toBe(true);
      const table = formatTenantLoad(view).split('\n');
      expect(table[0]).toBe(
        'TENANT  SESSIONS  IN FLIGHT  WAITING  WAITING FOR QUOTA  CAP  WAITING FOR CAP',
      );
      expect(table.find((line) => line.startsWith('A '))).toMatch(/ {2}1 +\d+$/);

      const pod = cluster.pods[0]!;
      const metrics = createApiMetrics({
        redis: pod.store.redis,
        prefix: cluster.prefix,
        queues: pod.queues,
        logger: silentLogger,
      });
      const text = await metrics.registry.metrics();
      expect(text).toMatch(/orq_tenant_tasks\{tenant="A",state="waiting_for_cap"\} \d+/);
      expect(text).not.toContain('tenant="B",state="waiting_for_cap"');

      const doneB = await cluster.client.wait(b.id, { timeoutMs: TIMEOUT });
      const doneA = await cluster.client.wait(a.id, { timeoutMs: TIMEOUT });
      expect(doneA.session.state).toBe('COMPLETED');
      expect(doneB.session.state).toBe('COMPLETED');
      expect(most.A).toBe(1);
      // B was not held back by A's cap (nor capped itself).
      expect(most.B).toBeGreaterThan(1);
      // Every task ran once, and none spent a second attempt waiting for its slot.
      const ran = calls.execute.map((r) => `${tenantOf.get(r.sessionId)}:${r.task.id}`).sort();
      expect(ran).toEqual(['A:T1', 'A:T2', 'A:T3', 'A:T4', 'B:T1', 'B:T2', 'B:T3', 'B:T4']);
      expect([...doneA.tasks, ...doneB.tasks].every((t) => t.attempts === 1)).toBe(true);
      const jobs = await queue.getJobs(['completed'], 0, -1);
      expect(jobs).toHaveLength(8);
      expect(jobs.every((job) => job.attemptsMade === 1)).toBe(true);
      // A's jobs were started again after a hand-back: that is what the cap cost them.
      const startedA = jobs
        .filter((job) => (job.data as { tenant?: string }).tenant === 'A')
        .reduce((sum, job) => sum + (job.attemptsStarted ?? 0), 0);
      expect(startedA).toBeGreaterThan(4);
      // Every slot was given back.
      const slots = new TenantSlots(cluster.pods[0]!.store.redis, cluster.prefix);
      expect(await slots.inFlight('A')).toBe(0);
    } finally {
      await queue.close();
    }
  }, 90_000);

  it('is off by default: no tenant is capped, and nothing is asked of Redis', async () => {
    const { models } = recordingModels(FOUR);
    const cluster = await startCluster({ models });
    expect(cluster.config.tenants).toEqual({ maxTasksInFlight: 0, caps: {}, weights: {} });
    expect(tenantCap(cluster.config.tenants, 'A')).toBe(0);
    const { id } = await cluster.client.submit({ instruction: 'a', tenant: 'A' });
    const done = await cluster.client.wait(id, { timeoutMs: TIMEOUT });
    expect(done.session.state).toBe('COMPLETED');
    const redis = cluster.pods[0]!.store.redis;
    expect(await redis.keys(`${cluster.prefix}:tenant:*`)).toEqual([]);
  });
});

describe('tenant slots in Redis', () => {
  it("leaves the slot to the job's new delivery when a delivery lost its job", async () => {
    const redis = createConnection(inject('redisUrl'), 'consumer', silentLogger);
    try {
      const slots = new TenantSlots(redis, `t-slots-${Date.now()}`);
      const config = TenantsConfig.parse({ maxTasksInFlight: 1 });
      const job = { id: 'work|s|A|1', data: { tenant: 'acme' } } as Job;
      // The paused delivery wakes up, finds its job taken over, and stops.
      const stale = withTenantCap(
        () => Promise.reject(new DeliveryLostError('work', job.id)),
        slots,
        config,
        60_000,
        silentLogger,
      );
      // The new delivery holds the slot under the same job id while it runs.
      expect(await slots.acquire('acme', 1, 'work|s|A|1', 60_000, 1_000)).toEqual({
        granted: true,
      });
      await expect(stale(job, 'stale-token')).rejects.toBeInstanceOf(DeliveryLostError);
      expect(await slots.inFlight('acme')).toBe(1);
      // A job that fails for another reason gives its slot back.
      const failing = withTenantCap(
        () => Promise.reject(new Error('the agent crashed')),
        slots,
        config,
        60_000,
        silentLogger,
      );
      await expect(failing(job, 'token')).rejects.toThrow('the agent crashed');
      expect(await slots.inFlight('acme')).toBe(0);
    } finally {
      redis.disconnect();
    }
  });

  it('grants up to the cap, again to a holder, and frees a lease nobody renews once it lapses', async () => {
    const redis = createConnection(inject('redisUrl'), 'consumer', silentLogger);
    try {
      const slots = new TenantSlots(redis, `t-slots-${Date.now()}`);
      expect(await slots.acquire('acme', 1, 'job-1', 300, 1_000)).toEqual({ granted: true });
      // The same job again (redelivered after its pod died): it has the slot already.
      expect(await slots.acquire('acme', 1, 'job-1', 300, 1_000)).toEqual({ granted: true });
      const refused = await slots.acquire('acme', 1, 'job-2', 300, 1_000);
      expect(refused).toMatchObject({ granted: false, inFlight: 1 });
      // Told to look again no later than the lease lapses.
      expect(refused.granted ? 0 : refused.waitMs).toBeLessThanOrEqual(300);
      // Another tenant is not affected.
      expect(await slots.acquire('other', 1, 'job-3', 300, 1_000)).toEqual({ granted: true });
      await eventually(
        async () => ((await slots.inFlight('acme')) === 0 ? true : undefined),
        'the lease to lapse',
      );
      expect(await slots.renew('acme', 'job-1', 300)).toBe(false);
      expect(await slots.acquire('acme', 1, 'job-2', 300, 1_000)).toEqual({ granted: true });
      await slots.release('acme', 'job-2');
      expect(await slots.inFlight('acme')).toBe(0);
    } finally {
      redis.disconnect();
    }
  });
});
