import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomUUID } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, describe, expect, it, inject } from 'vitest';
import {
  type LlmRoleConfig,
  type RateLimitConfig,
  LlmRoleConfig as LlmRoleConfigSchema,
} from '../../src/shared/config/schema.js';
import type { ChatRequest } from '../../src/workers/llm/chat.js';
import { createAnthropicProvider } from '../../src/workers/llm/anthropic-provider.js';
import { createOpenAiProvider } from '../../src/workers/llm/openai-provider.js';
import { ProviderQuotas, QuotaWaitError, providerLimit } from '../../src/workers/llm/quota.js';
import { runAsQuotaCaller, type QuotaCaller } from '../../src/workers/llm/quota-caller.js';
import { TaskOutput } from '../../src/workers/llm/llm-models.js';
import { QuotaStore, type QuotaSettings } from '../../src/shared/store/quota-store.js';
import { parseConfig } from '../../src/shared/config/load.js';
import { startTestRedis } from '../support/test-redis.js';
import { createClient } from '../../src/producers/client.js';
import { createRoleMetrics } from '../../src/workers/metrics.js';
import { clusterPerTest } from '../support/cluster.js';
import { makeSession, openStore, recordSession } from '../support/executors.js';
import { createMeter } from '../../src/workers/llm/metered.js';
import { UsageStore } from '../../src/shared/store/usage-store.js';
import { stopProcess, waitForOutput } from '../support/cli.js';
import {
  FAKE_USAGE,
  startFakeLlmServer,
  type FakeLlmRequest,
  type FakeLlmServer,
  type FakeReply,
  type Protocol,
} from '../support/fake-llm-server.js';
import { eventually } from '../support/scenarios.js';
import { bearer, serveApi } from '../support/http.js';

/**
 * Provider quotas shared by every pod (issue 33): two stores or gates on two connections stand
 * for two pods; the fake servers enforce a quota of their own and answer 429 beyond it.
 */

const connections: Redis[] = [];
function connect(): Redis {
  const redis = new Redis(inject('redisUrl'));
  connections.push(redis);
  return redis;
}
afterAll(() => {
  for (const c of connections) c.disconnect();
});

/** Two "pods": a store each, on connections of their own, under one fresh prefix. */
function twoPods(): [QuotaStore, QuotaStore] {
  const prefix = `q${randomUUID().slice(0, 8)}`;
  return [new QuotaStore(connect(), prefix), new QuotaStore(connect(), prefix)];
}

const limitId = () => providerLimit('openai', undefined, randomUUID()).id;

describe('a limit in Redis, shared by every pod', () => {
  it('grants a bucket of requests once over all pods', async () => {
    const [a, b] = twoPods();
    const id = limitId();
    // 60 a minute, 5 s of it at once: a bucket of 5.
    const settings: QuotaSettings = { requestsPerMinute: 60, burstSeconds: 5 };
    const outcomes = [];
    for (let i = 0; i < 6; i += 1) {
      outcomes.push(await (i % 2 === 0 ? a : b).acquire(id, settings, 0, `c${i}`, 10_000));
    }
    expect(outcomes.slice(0, 5).every((o) => o.granted)).toBe(true);
    const refused = outcomes[5];
    expect(refused).toMatchObject({ granted: false, reason: 'requests' });
    // One request comes back a second later (60 a minute).
    expect(refused && !refused.granted && refused.waitMs).toBeLessThanOrEqual(1000);
    expect((await a.read(id, settings)).granted).toBe(5);
  });

  it('reserves the estimate of tokens, then settles the usage the provider reported', async () => {
    const [a, b] = twoPods();
    const id = limitId();
    // 600 tokens a minute, all at once: the bucket holds 600 and refills 10 a second.
    const settings: QuotaSettings = { tokensPerMinute: 600, burstSeconds: 60 };
    expect(await a.acquire(id, settings, 500, 'call-1', 10_000)).toEqual({ granted: true });
    const during = await b.read(id, settings);
    expect(during.tokensLeft).toBeGreaterThanOrEqual(100);
    expect(during.tokensLeft).toBeLessThan(200);
    // Another pod's call of 200 must wait for the tokens the first one reserved.
    expect(await b.acquire(id, settings, 200, 'call-2', 10_000)).toMatchObject({
      granted: false,
      reason: 'tokens',
    });
    await a.settle(id, settings, 500, FAKE_USAGE.input + FAKE_USAGE.output, 'call-1');
    const after = await b.read(id, settings);
    // What the call did not use came back: 600 - 18, give or take the refill meanwhile.
    expect(after.tokensLeft).toBeGreaterThanOrEqual(582);
    expect(after.usedTokens).toBe(18);
    expect(await b.acquire(id, settings, 200, 'call-2', 10_000)).toEqual({ granted: true });
  });

  it('holds maxConcurrent slots over all pods and frees one when its call settles', async () => {
    const [a, b] = twoPods();
    const id = limitId();
    const settings: QuotaSettings = { maxConcurrent: 2, burstSeconds: 10 };
    expect((await a.acquire(id, settings, 0, 'one', 60_000)).granted).toBe(true);
    expect((await b.acquire(id, settings, 0, 'two', 60_000)).granted).toBe(true);
    expect(await a.acquire(id, settings, 0, 'three', 60_000)).toMatchObject({
      granted: false,
      reason: 'concurrent',
    });
    expect((await b.read(id)).inFlight).toBe(2);
    await b.settle(id, settings, 0, 0, 'two');
    expect((await a.acquire(id, settings, 0, 'three', 60_000)).granted).toBe(true);
  });

  it('a 429 pauses every pod until the time given, and the buckets restart empty', async () => {
    const [a, b] = twoPods();
    const id = limitId();
    const settings: QuotaSettings = { requestsPerMinute: 600, burstSeconds: 10 };
    expect((await a.acquire(id, settings, 0, 'x', 10_000)).granted).toBe(true);
    const lasts = await a.pause(id, 30_000);
    expect(lasts).toBeGreaterThan(29_000);
    const refused = await b.acquire(id, settings, 0, 'y', 10_000);
    expect(refused).toMatchObject({ granted: false, reason: 'paused' });
    expect(refused.granted === false && refused.waitMs).toBeGreaterThan(29_000);
    // A shorter pause asked later does not cut the longer one.
    expect(await b.pause(id, 1_000)).toBeGreaterThan(29_000);
    const state = await a.read(id, settings);
    expect(state).toMatchObject({ throttled: 2, requestsLeft: 0 });
  });
});

describe('a pod killed with kill -9 while it holds a slot', () => {
  let child: ReturnType<typeof spawn> | undefined;
  afterEach(async () => {
    if (child) await stopProcess(child, 'SIGKILL');
  });

  it('gives the slot back when its lease lapses', async () => {
    const [store] = twoPods();
    const id = limitId();
    const fixture = fileURLToPath(new URL('../fixtures/hold-quota-slot.ts', import.meta.url));
    child = spawn(
      process.execPath,
      ['--import', 'tsx', fixture, inject('redisUrl'), store.prefix, id, '1500'],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    await waitForOutput(child, 'held', 30_000);
    child.kill('SIGKILL');
    const settings: QuotaSettings = { maxConcurrent: 1, burstSeconds: 10 };
    expect(await store.acquire(id, settings, 0, 'next', 10_000)).toMatchObject({
      granted: false,
      reason: 'concurrent',
    });
    // No one settles the dead process's call: its lease lapsing is what frees the slot.
    await eventually(
      async () =>
        (await store.acquire(id, settings, 0, 'next', 10_000)).granted ? true : undefined,
      'the slot of the killed process to be free',
    );
    expect((await store.read(id)).inFlight).toBe(1);
  });
});

describe('a limit through a Redis restart (AOF)', () => {
  it('keeps its pause, its slots in flight and its counts, and its scripts load again', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'orq-quota-restart-'));
    const redis = await startTestRedis({ dir, appendonly: true });
    const connection = new Redis(redis.url);
    try {
      const store = new QuotaStore(connection, 'r');
      const id = limitId();
      const settings: QuotaSettings = { maxConcurrent: 2, burstSeconds: 10 };
      expect((await store.acquire(id, settings, 0, 'before', 600_000)).granted).toBe(true);
      await store.pause(id, 60_000);
      await redis.stop();
      await redis.start();
      // The restarted server has none of the scripts: ioredis loads them again on NOSCRIPT.
      const state = await eventually(
        () => store.read(id).catch(() => undefined),
        'the store to reach the restarted Redis',
        20_000,
      );
      expect(state).toMatchObject({ inFlight: 1, granted: 1, throttled: 1 });
      expect(state.pausedForMs).toBeGreaterThan(50_000);
      expect(await store.acquire(id, settings, 0, 'after', 600_000)).toMatchObject({
        granted: false,
        reason: 'paused',
      });
      await store.settle(id, settings, 0, 0, 'before');
      expect((await store.read(id)).inFlight).toBe(0);
    } finally {
      connection.disconnect();
      await redis.stop();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('a token reservation that is never settled (its pod died mid-call)', () => {
  it('holds nothing for good: the bucket refills past it', async () => {
    const [store] = twoPods();
    const id = limitId();
    // A bucket of 1,000 tokens, refilled 1,000 a second.
    const settings: QuotaSettings = { tokensPerMinute: 60_000, burstSeconds: 1 };
    expect(await store.acquire(id, settings, 1_000, 'dead', 10_000)).toEqual({ granted: true });
    expect(await store.acquire(id, settings, 1_000, 'next', 10_000)).toMatchObject({
      granted: false,
      reason: 'tokens',
    });
    await eventually(
      async () =>
        (await store.acquire(id, settings, 1_000, 'next', 10_000)).granted ? true : undefined,
      'the bucket to refill past the dead call',
    );
  });
});

// ---------------------------------------------------------------------------------------------
// Gates over the real SDK providers against servers that enforce a quota

const KEY = 'sk-orq-quota-test';
const env = { TEST_KEY: KEY };

function roleConfig(server: FakeLlmServer, rateLimit: Partial<RateLimitConfig>): LlmRoleConfig {
  return LlmRoleConfigSchema.parse({
    provider: server.protocol,
    baseUrl: server.baseUrl,
    model: 'test',
    apiKeyEnv: 'TEST_KEY',
    maxRetries: 2,
    timeoutSeconds: 20,
    rateLimit,
  });
}

function gated(server: FakeLlmServer, quotas: ProviderQuotas, rateLimit: Partial<RateLimitConfig>) {
  const config = roleConfig(server, rateLimit);
  const create = server.protocol === 'openai' ? createOpenAiProvider : createAnthropicProvider;
  return quotas.gate(create('worker', config, env), 'worker', config, env);
}

const request: ChatRequest = {
  role: 'worker',
  system: 'You execute tasks.',
  user: 'Do the task.',
  schema: TaskOutput,
  schemaName: 'TaskOutput',
  temperature: 0,
  timeoutMs: 20_000,
};
const taskOutput = (): FakeReply => ({ json: { output: 'done', log: '' } });

describe.each([
  ['openai', true],
  ['anthropic', false],
] as [Protocol, boolean][])('gated calls to a %s server', (protocol, retryAfter) => {
  let server: FakeLlmServer;
  beforeAll(async () => {
    // One request a minute: the second is answered 429 (with Retry-After on the OpenAI side,
    // only anthropic-ratelimit-requests-reset on the other).
    server = await startFakeLlmServer(protocol, taskOutput, {
      quota: { requests: 1, perMs: 60_000, retryAfter },
    });
  });
  afterAll(() => server.close());

  it("a 429 pauses both pods until the provider's time, with no retry by the SDK", async () => {
    const [storeA, storeB] = twoPods();
    const metricsB = createRoleMetrics();
    const podA = gated(server, new ProviderQuotas(storeA), {});
    const podB = gated(server, new ProviderQuotas(storeB, { events: metricsB }), {});
    const first = await podA.complete(request);
    expect(first.usage).toEqual({ inputTokens: FAKE_USAGE.input, outputTokens: FAKE_USAGE.output });

    const throttled = await podB.complete(request).catch((e: unknown) => e);
    expect(throttled).toBeInstanceOf(QuotaWaitError);
    expect(throttled).toMatchObject({ reason: 'throttled', code: 'QUOTA_WAIT' });
    expect((throttled as QuotaWaitError).waitMs).toBeGreaterThan(50_000);
    // The SDK's own retries (maxRetries 2) did not send it again.
    expect(server.quotaLog.refused).toHaveLength(1);
    const limitName = providerLimit(protocol, server.baseUrl, KEY).name;
    const podMetrics = await metricsB.registry.metrics();
    expect(podMetrics).toContain(`orq_quota_429_total{limit="${limitName}"} 1`);
    expect(podMetrics).toContain(
      `orq_quota_waits_total{limit="${limitName}",reason="throttled"} 1`,
    );

    // Pod A is paused too, and its call does not reach the server.
    const paused = await podA.complete(request).catch((e: unknown) => e);
    expect(paused).toMatchObject({ reason: 'paused' });
    expect((paused as Error).message).toMatch(/^waiting for quota \(\w+ 127\.0\.0\.1:\d+/);
    expect(server.requests).toHaveLength(2);

    // A call with another key spends another limit, which the pause does not stop: it
    // reaches the server (whose quota is per server here, so it is answered 429 too).
    const other = { ...env, TEST_KEY: 'sk-another' };
    const config = roleConfig(server, {});
    const create = protocol === 'openai' ? createOpenAiProvider : createAnthropicProvider;
    const otherPod = new ProviderQuotas(storeA).gate(
      create('worker', config, other),
      'worker',
      config,
      other,
    );
    await expect(otherPod.complete(request)).rejects.toMatchObject({ reason: 'throttled' });
    expect(server.requests).toHaveLength(3);
  });
});

describe('a 429 that no wait ends', () => {
  it("(OpenAI's insufficient_quota: no credit left) fails the call, pausing no one", async () => {
    const server = await startFakeLlmServer('openai', () => ({
      status: 429,
      type: 'insufficient_quota',
    }));
    try {
      const [store] = twoPods();
      const pod = gated(server, new ProviderQuotas(store), {});
      await expect(pod.complete(request)).rejects.toMatchObject({
        code: 'LLM_CALL_FAILED',
        details: { status: 429 },
      });
      expect(server.requests).toHaveLength(1);
      const limit = providerLimit('openai', server.baseUrl, KEY);
      expect(await store.read(limit.id)).toMatchObject({ throttled: 0, pausedForMs: 0 });
    } finally {
      await server.close();
    }
  });
});

describe('a gated call settles its tokens', () => {
  let server: FakeLlmServer;
  beforeAll(async () => {
    server = await startFakeLlmServer('openai', taskOutput);
  });
  afterAll(() => server.close());

  it('with the usage the provider reported, not the estimate it reserved', async () => {
    const [store] = twoPods();
    // A bucket of 1,000 tokens refilled 100 a second; the call reserves ~1,030 (its prompts
    // and 1,024 of output), more than the bucket, and is billed 18.
    const rateLimit = { tokensPerMinute: 6_000, burstSeconds: 10, maxConcurrent: 1 };
    const pod = gated(server, new ProviderQuotas(store), rateLimit);
    await pod.complete(request);
    const limit = providerLimit('openai', server.baseUrl, KEY);
    const state = await store.read(limit.id, { ...rateLimit });
    expect(state.usedTokens).toBe(FAKE_USAGE.input + FAKE_USAGE.output);
    // The bucket lost the 18 used, not the ~1,030 reserved; the slot is free again.
    expect(state.tokensLeft).toBeGreaterThanOrEqual(982);
    expect(state.inFlight).toBe(0);
    expect(await store.report()).toEqual([
      {
        id: limit.id,
        name: limit.name,
        tokensPerMinute: 6_000,
        maxConcurrent: 1,
        burstSeconds: 10,
        tokensLeft: expect.any(Number) as number,
        inFlight: 0,
        pausedForMs: 0,
        granted: 1,
        refused: 0,
        throttled: 0,
        usedTokens: FAKE_USAGE.input + FAKE_USAGE.output,
        waiting: 0,
        line: [],
      },
    ]);
  });
});

describe('the session budget of a call that waits for quota', () => {
  it('gets its reservation back and counts no call, failed or made', async () => {
    const db = openStore();
    try {
      const session = makeSession({ budget: { maxTokens: 100_000 } });
      await recordSession(db.store, session);
      const usageStore = new UsageStore(db.redis, db.store.prefix);
      const meter = createMeter({ usageStore, session, role: 'worker' });
      const limit = providerLimit('openai', undefined, 'sk-meter');
      const waiting = meter.withReservation(
        { method: 'execute', taskId: 't1' },
        () => Promise.reject(new QuotaWaitError(limit, 'requests', 5_000)),
        () => undefined,
      );
      await expect(waiting).rejects.toBeInstanceOf(QuotaWaitError);
      const usage = await usageStore.read(session.id);
      expect(usage).toMatchObject({
        reserved: { tokens: 0 },
        failedCalls: 0,
        total: { calls: 0, inputTokens: 0, outputTokens: 0 },
        grants: 1,
      });
    } finally {
      db.close();
    }
  });
});

// ---------------------------------------------------------------------------------------------
// A role job waiting for quota

const PLAN = {
  summary: 'one task',
  tasks: [{ id: 't1', title: 'write it', acceptance: 'it is written', dependencies: [] }],
};

function happyReply(request: FakeLlmRequest): FakeReply {
  switch (request.schemaName) {
    case 'PlanBreakdown':
      return { json: PLAN };
    case 'QualityJudgement':
      return { json: { score: 90, isAcceptable: true, issues: [], suggestions: [] } };
    case 'TaskOutput':
      return { json: { output: 'written', log: '' } };
    case 'TaskJudgement':
      return {
        json: {
          success: true,
          shouldContinue: false,
          shouldReplan: false,
          reason: 'meets the criteria',
        },
      };
    default:
      return { status: 400 };
  }
}

describe('a job whose call waits for quota', () => {
  const startCluster = clusterPerTest();
  let server: FakeLlmServer;
  let throttledOnce = false;
  beforeAll(async () => {
    process.env.TEST_KEY = KEY;
    server = await startFakeLlmServer('openai', (r) => {
      if (r.schemaName === 'PlanBreakdown' && !throttledOnce) {
        throttledOnce = true;
        return { status: 429, retryAfterMs: 2_500 };
      }
      return happyReply(r);
    });
  });
  afterAll(() => server.close());

  it('is handed back as delayed, showing why, without its lock or a failed attempt', async () => {
    // One attempt: a quota wait counted as a failure would fail the session.
    const cluster = await startCluster({ config: { queues: { attempts: 1 } } });
    const session = await cluster.client.submit({
      instruction: 'write it',
      tenant: 'acme',
      config: {
        llm: {
          default: {
            provider: 'openai',
            baseUrl: server.baseUrl,
            model: 'test',
            apiKeyEnv: 'TEST_KEY',
            rateLimit: {},
          },
        },
      },
    });
    const plan = cluster.pods[0]?.queues.get('plan');
    if (!plan) throw new Error('no plan queue');
    const delayed = await eventually(
      async () => (await plan.getJobs(['delayed']))[0],
      'the plan job to be handed back',
    );
    expect(delayed.progress).toMatchObject({
      activity: `waiting for quota (${providerLimit('openai', server.baseUrl, KEY).name})`,
    });
    // Not holding its lock while it waits.
    expect(await connect().exists(`${plan.toKey(delayed.id ?? '')}:lock`)).toBe(0);
    // Its tenant shows it waiting for quota, though the session has released no task yet.
    const waiting = await eventually(async () => {
      const acme = (await cluster.client.tenants()).find((t) => t.tenant === 'acme');
      return acme && acme.jobsWaitingForQuota > 0 ? acme : undefined;
    }, 'acme waiting for quota in the tenant view');
    expect(waiting).toMatchObject({ sessions: 1, jobsWaitingForQuota: 1, tasksInFlight: 0 });

    const view = await cluster.client.wait(session.id, { timeoutMs: 25_000 });
    expect(view.session.state).toBe('COMPLETED');
    const done = await plan.getJob(delayed.id ?? '');
    // Started twice, one attempt made: the wait was no failure.
    expect(done?.attemptsStarted).toBe(2);
    expect(done?.attemptsMade).toBe(1);
    expect(server.statuses.filter((s) => s === 429)).toHaveLength(1);
    // Waiting no more once it ran.
    expect((await cluster.client.tenants()).find((t) => t.tenant === 'acme')).toBeUndefined();
  });
});

const TOKEN = 'quota-test-token-0123456789';

describe('the quotas people see', () => {
  it('GET /quotas and /metrics show each limit: its rate, what is left, waits and 429s', async () => {
    const [store] = twoPods();
    const limit = providerLimit('anthropic', undefined, 'sk-visible');
    const rateLimit = { requestsPerMinute: 120, maxConcurrent: 3, burstSeconds: 5 };
    await store.register(limit.id, { name: limit.name, rateLimit });
    expect((await store.acquire(limit.id, rateLimit, 0, 'a', 60_000)).granted).toBe(true);
    const pausedAt = Date.now();
    await store.pause(limit.id, 30_000);
    expect((await store.acquire(limit.id, rateLimit, 0, 'b', 60_000)).granted).toBe(false);

    const config = parseConfig({ redis: { prefix: store.prefix } });
    const client = await createClient({ connection: inject('redisUrl'), config });
    const http = await serveApi(client, { token: TOKEN });
    try {
      const headers = bearer(TOKEN);
      const answer = await fetch(`${http.url}/quotas`, { headers });
      expect(answer.status).toBe(200);
      const { quotas } = (await answer.json()) as { quotas: unknown[] };
      expect(quotas).toEqual([
        {
          id: limit.id,
          name: limit.name,
          requestsPerMinute: 120,
          maxConcurrent: 3,
          burstSeconds: 5,
          requestsLeft: 0,
          inFlight: 1,
          pausedForMs: expect.any(Number) as number,
          granted: 1,
          refused: 1,
          throttled: 1,
          usedTokens: 0,
          // The refused call waits in the limit's line (a call of no job: tenant default).
          waiting: 1,
          line: [
            {
              tenant: 'default',
              waiting: 1,
              oldestWaitMs: expect.any(Number) as number,
              sessions: [{ sessionId: '', waiting: 1, place: 1 }],
            },
          ],
        },
      ]);
      const metrics = await (await fetch(`${http.url}/metrics`, { headers })).text();
      const label = `{limit="${limit.name}"}`;
      expect(metrics).toContain(`orq_quota_requests_per_minute${label} 120`);
      expect(metrics).toContain(`orq_quota_in_flight${label} 1`);
      expect(metrics).toContain(`orq_quota_http_429${label} 1`);
      expect(metrics).toContain(`orq_quota_waits${label} 1`);
      expect(metrics).toContain(`orq_quota_line_waiting${label} 1`);
      expect(metrics).toContain(
        `orq_quota_line_tenant_waiting{limit="${limit.name}",tenant="default"} 1`,
      );
      // Per session waiting (a call of no job has no session id): its calls and first place.
      const session = `{limit="${limit.name}",tenant="default",session=""}`;
      expect(metrics).toContain(`orq_quota_line_session_waiting${session} 1`);
      expect(metrics).toContain(`orq_quota_line_session_place${session} 1`);
      // What is left of the 30 s pause: less the time this test took to get here (seconds on a
      // loaded machine), give or take a second for the clocks.
      const left = Number(
        new RegExp(`orq_quota_paused_seconds\\{limit="[^"]+"\\} ([\\d.]+)`).exec(metrics)?.[1],
      );
      const elapsed = (Date.now() - pausedAt) / 1000;
      expect(left).toBeLessThanOrEqual(30);
      expect(left).toBeGreaterThanOrEqual(30 - elapsed - 1);
    } finally {
      await http.close();
      await client.close();
    }
  });
});

describe('a gated call cancelled while it waits in its job', () => {
  it('gives its place in the line up at once', async () => {
    const server = await startFakeLlmServer('openai', taskOutput);
    try {
      const [store] = twoPods();
      // Every wait slept in the job, none handed back.
      const quotas = new ProviderQuotas(store, { maxInJobWaitMs: 600_000 });
      const provider = gated(server, quotas, { requestsPerMinute: 60, burstSeconds: 1 });
      const limit = providerLimit('openai', server.baseUrl, KEY);
      await store.pause(limit.id, 60_000);
      // Its session was cancelled: the call takes its place, then stops sleeping at once.
      const controller = new AbortController();
      controller.abort();
      const job: QuotaCaller = {
        jobId: 'job-1',
        sessionId: 's',
        step: false,
        lanes: new Set(),
        joined: new Set(),
      };
      await expect(
        runAsQuotaCaller(job, () => provider.complete({ ...request, signal: controller.signal })),
      ).rejects.toThrow(/abort/i);
      expect([...job.joined]).toEqual([limit.id]);
      expect((await store.line(limit.id)).entries).toEqual([]);
      expect(server.requests).toHaveLength(0);
    } finally {
      await server.close();
    }
  });
});
