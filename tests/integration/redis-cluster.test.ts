import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { parseConfig } from '../../src/shared/config/load.js';
import type { OrqConfig } from '../../src/shared/config/schema.js';
import { silentLogger } from '../../src/shared/logger.js';
import { ALL_QUEUES, queuePrefix } from '../../src/shared/queues.js';
import type { SessionEnded } from '../../src/shared/domain/session.js';
import {
  configuredConnection,
  type ConnectionInput,
  type RedisConnection,
} from '../../src/shared/redis.js';
import { sessionKeys } from '../../src/shared/store/keys.js';
import { QuotaStore, quotaKeys } from '../../src/shared/store/quota-store.js';
import { providerLimit } from '../../src/workers/llm/quota.js';
import { lineClass } from '../../src/shared/quota-line.js';
import { createClient, openClient, type OrqClient } from '../../src/producers/client.js';
import { createHttpServer } from '../../src/producers/http/server.js';
import { sweepOutboxes } from '../../src/workers/coordinator/outbox-sweeper.js';
import { launchRoles, startRoles, type RunningRoles } from '../../src/workers/registry.js';
import { followSessionEnds } from '../../src/workers/session-ends.js';
import { ALL_ROLES } from '../support/cluster.js';
import { makeSession } from '../support/executors.js';
import {
  nodeOfSlot,
  slotOf,
  startLocalRedisCluster,
  type LocalRedisCluster,
} from '../support/redis-cluster.js';
import { exampleScenario, historyOf } from '../support/scenarios.js';
import { writeUnflushedSession } from '../support/unflushed-session.js';

const TIMEOUT = 20_000;

let redisCluster: LocalRedisCluster;
let config: OrqConfig;
let connection: ConnectionInput;
let pods: RunningRoles[] = [];
let client: OrqClient;

beforeAll(async () => {
  redisCluster = await startLocalRedisCluster(3);
  config = parseConfig({
    redis: { url: redisCluster.urls[1], cluster: true, prefix: prefixSpreadOverNodes() },
  });
  connection = configuredConnection(config) as ConnectionInput;
  // Two pods, as two machines would run them: every role in each.
  for (let i = 0; i < 2; i += 1) {
    pods.push(await startRoles({ roles: ALL_ROLES, connection, config, logger: silentLogger }));
  }
  client = await createClient({ connection, config });
}, 60_000);

afterAll(async () => {
  await client?.close();
  await Promise.all(pods.map((p) => p.close(5_000)));
  pods = [];
  await redisCluster?.stop();
});

/**
 * A fresh prefix whose queue tags ({prefix:queue}) fall on more than one of the three nodes, so
 * the test can see the queues spread.
 */
function prefixSpreadOverNodes(): string {
  for (;;) {
    const prefix = `c${randomUUID().slice(0, 8)}`;
    const nodes = new Set(ALL_QUEUES.map((q) => nodeOfSlot(slotOf(`{${prefix}:${q}}`), 3)));
    if (nodes.size > 1) return prefix;
  }
}

/** The node (index) that holds `key`, asked of the nodes themselves. */
async function nodeOf(key: string): Promise<number> {
  const found = await Promise.all(redisCluster.nodes.map((n) => n.exists(key).catch(() => 0)));
  return found.findIndex((n) => n === 1);
}

describe('orq on a Redis Cluster of three nodes', () => {
  it('runs sessions with dependencies and a replan to completion, spread over the nodes', async () => {
    const scenarios = ['diamond.yaml', 'replan-task.yaml', 'continue-then-done.yaml'];
    const submitted = [];
    for (let i = 0; i < 6; i += 1) {
      const scenario = exampleScenario(scenarios[i % scenarios.length]!);
      submitted.push(
        await client.submit({
          instruction: `cluster session ${i}`,
          config: { llm: { scenario } },
        }),
      );
    }
    for (const { id } of submitted) {
      const view = await client.wait(id, { timeoutMs: TIMEOUT });
      expect(view.session.state).toBe('COMPLETED');
      expect(view.tasks.length).toBeGreaterThan(0);
    }
    const replanned = await client.get(submitted[1]!.id);
    expect(replanned.tasks.some((t) => t.state === 'REPLACED_BY_REPLAN')).toBe(true);

    // Sessions live where their {sessionId} hash tag puts them: on more than one node. So do
    // the queues, each under a {prefix:queue} tag of its own (the prefix was picked so that
    // their tags fall on more than one node).
    // Session ids are random, so six of them share one node one time in 243: until they spread,
    // add sessions (each one more is on another node two times in three).
    const metaOf = (id: string) => sessionKeys(config.redis.prefix, id).meta;
    const expectedHome = (id: string) => nodeOfSlot(slotOf(metaOf(id)), 3);
    while (new Set(submitted.map(({ id }) => expectedHome(id))).size < 2) {
      const extra = await client.submit({
        instruction: `cluster session ${submitted.length}`,
        config: { llm: { scenario: exampleScenario('diamond.yaml') } },
      });
      submitted.push(extra);
      expect((await client.wait(extra.id, { timeoutMs: TIMEOUT })).session.state).toBe('COMPLETED');
    }
    const homes = await Promise.all(submitted.map(({ id }) => nodeOf(metaOf(id))));
    expect(homes).toEqual(submitted.map(({ id }) => expectedHome(id)));
    expect(new Set(homes).size).toBeGreaterThan(1);
    const queueHomes = await Promise.all(
      ALL_QUEUES.map((q) =>
        nodeOf(`${queuePrefix(config.redis.prefix, q, pods[0]!.store.redis)}:${q}:meta`),
      ),
    );
    expect(queueHomes.every((n) => n >= 0)).toBe(true);
    expect(new Set(queueHomes).size).toBeGreaterThan(1);
  });

  it('closes a client right after creating it without an unhandled error', async () => {
    // Its queues may still be checking the server (INFO on some node) when it closes.
    for (let i = 0; i < 10; i += 1) {
      const shortLived = await createClient({ connection, config });
      await shortLived.close();
    }
    await new Promise((r) => setTimeout(r, 200));
  });

  it('follows a session with watch and reads its history, as on one server', async () => {
    const { id } = await client.submit({
      instruction: 'watched on a cluster',
      config: { llm: { scenario: exampleScenario('diamond.yaml') } },
    });
    const seen = [];
    for await (const { entry } of client.watch(id)) seen.push(entry);
    expect(seen.at(-1)).toMatchObject({ type: 'state_change', entity: 'session', to: 'COMPLETED' });
    expect(await historyOf(client, id)).toEqual(seen);
  });

  it('refuses a single-server connection to a cluster node, naming the setting', async () => {
    const single = { ...config, redis: { ...config.redis, cluster: false } };
    const url = redisCluster.urls[0]!;
    // A library caller gives the cluster's nodes in the `connection` option.
    const library = {
      code: 'CONFIG_INVALID',
      message: expect.stringContaining('is a node of a Redis Cluster') as unknown,
      hint: expect.stringContaining("`connection` option the cluster's nodes") as unknown,
    };
    await expect(createClient({ connection: url, config: single })).rejects.toMatchObject(library);
    const options = {
      roles: ['worker' as const],
      connection: url,
      config: single,
      logger: silentLogger,
    };
    await expect(startRoles(options)).rejects.toMatchObject(library);
    // The CLI's user sets redis.cluster.
    const cli = {
      code: 'CONFIG_INVALID',
      hint: expect.stringContaining('ORQ__redis__cluster=true'),
    };
    await expect(
      openClient({ connection: url, config: single }, 'REDIS_URL'),
    ).rejects.toMatchObject(cli);
    await expect(launchRoles(options, 'REDIS_URL')).rejects.toMatchObject(cli);
  });

  it('serves the HTTP API, Bull Board and metrics from the cluster', async () => {
    // The sessions are scripted by a scenario file, a setting callers may set only when told.
    const app = await createHttpServer({
      client,
      logger: silentLogger,
      sessionOverrides: ['llm.scenario'],
    });
    try {
      expect((await app.inject({ url: '/readyz' })).json()).toEqual({ status: 'ok', redis: 'up' });
      // Several sessions, so that they live in several slots (and on several nodes).
      for (let i = 0; i < 6; i += 1) {
        const created = await app.inject({
          method: 'POST',
          url: '/sessions',
          payload: {
            instruction: `over http ${i}`,
            config: { llm: { scenario: exampleScenario('diamond.yaml') } },
          },
        });
        expect(created.statusCode).toBe(201);
        const { id } = created.json<{ id: string }>();
        expect((await client.wait(id, { timeoutMs: TIMEOUT })).session.state).toBe('COMPLETED');
      }
      const board = await app.inject({ url: '/admin/queues/api/queues?activeQueue=work' });
      const work = board
        .json<{ queues: { name: string; counts: Record<string, number> }[] }>()
        .queues.find((q) => q.name === 'work');
      expect(work?.counts.completed).toBeGreaterThan(0);
      const metrics = (await app.inject({ url: '/metrics' })).body;
      expect(metrics).toContain('orq_redis_up 1');
      expect(metrics).toContain('orq_queue_jobs{queue="work",state="waiting"} 0');
      // Sessions live on every node: counting them must not need them in one slot.
      expect(metrics).toMatch(/orq_sessions\{state="COMPLETED"\} [1-9]/);
    } finally {
      await app.close();
    }
  });

  it('drains the outboxes a crash left behind, on whichever node their sessions live', async () => {
    const { store, queues } = pods[0]!;
    const ids = Array.from({ length: 6 }, (_, i) => `crashed-${i}-${randomUUID()}`);
    for (const id of ids) await writeUnflushedSession(store, id);
    await sweepOutboxes(store, queues);
    for (const id of ids) {
      expect((await client.wait(id, { timeoutMs: TIMEOUT })).session.state).toBe('COMPLETED');
      expect(await store.readOutbox(id)).toEqual([]);
    }
  });

  it('deletes a session on the cluster, leaving in its slot the mark that refuses its id', async () => {
    const session = { ...makeSession(), state: 'COMPLETED' as const };
    const create = () =>
      client.store.apply(session.id, {
        eventId: `submit|${session.id}`,
        session: { record: session, expectedVersion: 0 },
      });
    expect((await create()).status).toBe('OK');
    expect(await client.delete(session.id)).toEqual({ sessionId: session.id, state: 'COMPLETED' });
    expect(await client.store.redis.exists(client.store.keys(session.id).deleted)).toBe(1);
    expect((await create()).status).toBe('GONE');
    expect(await client.store.loadSession(session.id)).toBeUndefined();
  });

  it('blocks, then cancels a session on the cluster, announcing its end to every pod', async () => {
    const { id } = await client.submit({
      instruction: 'blocked on a cluster',
      config: { llm: { scenario: exampleScenario('blocked-task.yaml') } },
    });
    const blocked = await client.wait(id, { timeoutMs: TIMEOUT, until: 'settled' });
    expect(blocked.session.state).toBe('BLOCKED');
    const ends: SessionEnded[] = [];
    const stop = await followSessionEnds(
      pods[0]?.store.redis as RedisConnection,
      config.redis.prefix,
      (ended) => ends.push(ended),
      silentLogger,
    );
    try {
      await client.cancel(id, 'the test cancels it');
      const view = await client.wait(id, { timeoutMs: TIMEOUT });
      expect(view.session.state).toBe('CANCELLED');
      await vi.waitFor(() => expect(ends).toContainEqual({ sessionId: id, state: 'CANCELLED' }));
    } finally {
      stop();
    }
  });

  it("shares a provider limit between two pods' connections, its keys on one node", async () => {
    const [a, b] = [pods[0], pods[1]].map(
      (pod) => new QuotaStore(pod?.store.redis as RedisConnection, config.redis.prefix),
    ) as [QuotaStore, QuotaStore];
    // Limits of several keys, so their hash tags fall on different nodes.
    for (const key of ['sk-1', 'sk-2', 'sk-3', 'sk-4']) {
      const limit = providerLimit('openai', undefined, key);
      const settings = { requestsPerMinute: 60, maxConcurrent: 1, burstSeconds: 1 };
      await a.register(limit.id, { name: limit.name, rateLimit: settings });
      expect(await a.acquire(limit.id, settings, 10, 'one', 60_000)).toEqual({ granted: true });
      expect(await b.acquire(limit.id, settings, 10, 'two', 60_000)).toMatchObject({
        granted: false,
      });
      const keys = quotaKeys(config.redis.prefix, limit.id);
      // Its line too: the refused call waits in it, every key of the limit on one node.
      expect((await a.line(limit.id)).entries).toHaveLength(1);
      for (const key of [
        keys.slots,
        keys.line,
        keys.leases,
        keys.waiters,
        keys.fair,
        keys.counts,
      ]) {
        expect(await nodeOf(key)).toBe(await nodeOf(keys.state));
      }
      await a.settle(limit.id, settings, 10, 5, 'one');
      expect(await b.pause(limit.id, 5_000)).toBeGreaterThan(4_000);
    }
    const report = await b.report();
    expect(report).toHaveLength(4);
    expect(report.every((q) => q.granted === 1 && q.throttled === 1 && q.usedTokens === 5)).toBe(
      true,
    );
  });

  it("grants a limit's waiting calls in the line's order, whichever pod asks first", async () => {
    const [a, b] = [pods[0], pods[1]].map(
      (pod) => new QuotaStore(pod?.store.redis as RedisConnection, config.redis.prefix),
    ) as [QuotaStore, QuotaStore];
    const limit = providerLimit('openai', undefined, `sk-line-${randomUUID()}`);
    // One request at a time, back 200 ms after it is taken.
    const settings = { requestsPerMinute: 300, burstSeconds: 0.2 };
    const call = (sessionId: string, n: number) => ({
      callId: `${sessionId}|job${n}|0`,
      sessionId,
      tenant: 'default',
      lineClass: lineClass({ priority: 5, step: false }),
      pathLead: 0,
      weight: 1,
    });
    await a.pause(limit.id, 1_000);
    // Pod a's session waits with 10 calls, a backlog (no credit); then pod b's session with one,
    // a sparse session with its credit, ranked first.
    const backlog = Array.from({ length: 10 }, (_, i) => call('big', i));
    for (const c of backlog) await a.acquire(limit.id, settings, 0, randomUUID(), 10_000, c);
    const small = call('small', 0);
    const joined = await b.acquire(limit.id, settings, 0, randomUUID(), 10_000, small);
    expect(joined).toMatchObject({ granted: false, place: 1 });
    // Each refill, pod a's waiters ask first: pod b's call is still granted first.
    const granted: string[] = [];
    let waiting = [...backlog];
    for (let round = 0; round < 5 && !granted.includes(small.callId); round += 1) {
      while (((await a.read(limit.id, settings)).requestsLeft ?? 0) < 1) await sleep(5);
      for (const [store, c] of [...waiting.map((c) => [a, c] as const), [b, small] as const]) {
        if ((await store.acquire(limit.id, settings, 0, randomUUID(), 10_000, c)).granted) {
          granted.push(c.callId);
          break;
        }
      }
      waiting = waiting.filter((c) => !granted.includes(c.callId));
    }
    expect(granted).toEqual([small.callId]);
  });
});
