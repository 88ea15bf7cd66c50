import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import {
  SessionConfig,
  type SessionConfig as SessionConfigType,
} from '../../src/shared/config/schema.js';
import { OrqError } from '../../src/shared/errors.js';
import { createBuiltinModels } from '../../src/workers/llm/builtin.js';
import { meteredModels } from '../../src/workers/llm/metered.js';
import type { RoleModels } from '../../src/workers/llm/types.js';
import { sessionKeys } from '../../src/shared/store/keys.js';
import {
  UsageStore,
  type Reservation,
  type ReserveOutcome,
} from '../../src/shared/store/usage-store.js';
import { runningTask } from '../support/executors.js';

const connections: Redis[] = [];
let store: UsageStore;
const prefix = `u${randomUUID().slice(0, 8)}`;

beforeAll(() => {
  for (let i = 0; i < 4; i += 1) connections.push(new Redis(inject('redisUrl')));
  store = new UsageStore(connections[0] as Redis, prefix);
});
afterAll(() => {
  for (const c of connections) c.disconnect();
});

/** A session id with a record (meta): the scripts count nothing for a deleted session. */
const session = async () => {
  const sid = randomUUID();
  await connections[0]!.hset(sessionKeys(prefix, sid).meta, 'state', 'RUNNING');
  return sid;
};
const E: Reservation = { tokens: 1000, usdMicros: 0 };
const noUsage = { inputTokens: 0, outputTokens: 0 };
/** Longer than any test: leases lapse only where a test makes them. */
const LEASE_MS = 600_000;
/** The reservation a granted outcome holds, with its lease, as a meter settles it. */
const heldBy = (outcome: ReserveOutcome): Reservation => ({
  ...E,
  ...(outcome.granted ? { lease: outcome.lease } : {}),
});

describe('reserving against a budget (Lua)', () => {
  it('grants while used + reserved + estimate stays within the limit, equality included', async () => {
    const sid = await session();
    const limits = { maxTokens: 2000 };
    const first = await store.reserve(sid, E, limits, LEASE_MS);
    expect(first).toMatchObject({ granted: true });
    expect(await store.reserve(sid, E, limits, LEASE_MS)).toMatchObject({ granted: true });
    // Only the calls in flight leave no room: wait for them, the session is not out of budget.
    expect(await store.reserve(sid, E, limits, LEASE_MS)).toMatchObject({
      granted: false,
      wait: true,
      limit: 'tokens',
      reservedTokens: 2000,
      alreadyExhausted: false,
    });
    const usage = await store.read(sid);
    expect(usage.reserved.tokens).toBe(2000);
    expect(usage).toMatchObject({ grants: 2, denied: 0 });
    expect(usage.exhausted).toBeUndefined();
    // The first call used 300 of its 1000: the 700 it did not use are room again.
    await store.settle(sid, {
      reserved: heldBy(first),
      role: 'worker',
      usage: { inputTokens: 200, outputTokens: 100 },
      usdMicros: 0,
    });
    const room = { tokens: 700, usdMicros: 0 };
    expect(await store.reserve(sid, room, limits, LEASE_MS)).toMatchObject({ granted: true });
    expect(await store.reserve(sid, E, limits, LEASE_MS)).toMatchObject({ wait: true });
  });

  it('refuses for good once what is used leaves no room for the estimate', async () => {
    const sid = await session();
    const limits = { maxTokens: 2000 };
    const first = await store.reserve(sid, E, limits, LEASE_MS);
    await store.settle(sid, {
      reserved: heldBy(first),
      role: 'worker',
      usage: { inputTokens: 900, outputTokens: 200 },
      usdMicros: 0,
    });
    expect(await store.reserve(sid, E, limits, LEASE_MS)).toMatchObject({
      granted: false,
      wait: false,
      limit: 'tokens',
      usedTokens: 1100,
      reservedTokens: 0,
      alreadyExhausted: false,
    });
    expect(await store.read(sid)).toMatchObject({
      grants: 1,
      denied: 1,
      exhausted: { limit: 'tokens', afterGrants: 1 },
    });
  });

  it('settles by releasing the reservation and adding the usage per role and task', async () => {
    const sid = await session();
    const granted = await store.reserve(sid, E, { maxTokens: 10_000 }, LEASE_MS);
    await store.settle(sid, {
      reserved: heldBy(granted),
      role: 'worker',
      taskId: 't1',
      usage: { inputTokens: 300, outputTokens: 50 },
      usdMicros: 1200,
    });
    await store.settle(sid, {
      reserved: { tokens: 0, usdMicros: 0 },
      role: 'planner',
      usage: { inputTokens: 100, outputTokens: 400 },
      usdMicros: 0,
      unpriced: true,
    });
    const usage = await store.read(sid);
    expect(usage.total).toEqual({ inputTokens: 400, outputTokens: 450, usd: 0.0012, calls: 2 });
    expect(usage.byRole.worker).toEqual({
      inputTokens: 300,
      outputTokens: 50,
      usd: 0.0012,
      calls: 1,
    });
    expect(usage.byRole.planner?.calls).toBe(1);
    expect(usage.byTask.t1).toEqual({ inputTokens: 300, outputTokens: 50, usd: 0.0012, calls: 1 });
    expect(usage.reserved.tokens).toBe(0);
    expect(usage.unpricedCalls).toBe(1);
  });

  it('counts a failed call apart and gives its reservation back', async () => {
    const sid = await session();
    const granted = await store.reserve(sid, E, { maxTokens: 1000 }, LEASE_MS);
    await store.settle(sid, {
      reserved: heldBy(granted),
      role: 'judge',
      usage: noUsage,
      usdMicros: 0,
      failed: true,
    });
    const usage = await store.read(sid);
    expect(usage).toMatchObject({ failedCalls: 1, reserved: { tokens: 0 }, total: { calls: 0 } });
    expect(await store.reserve(sid, E, { maxTokens: 1000 }, LEASE_MS)).toMatchObject({
      granted: true,
    });
  });

  it('counts the billed tokens of a failed call in the totals, but not as a call', async () => {
    const sid = await session();
    const granted = await store.reserve(sid, E, { maxTokens: 1000 }, LEASE_MS);
    await store.settle(sid, {
      reserved: heldBy(granted),
      role: 'worker',
      taskId: 't1',
      usage: { inputTokens: 300, outputTokens: 200 },
      usdMicros: 0,
      unpriced: true,
      failed: true,
    });
    const usage = await store.read(sid);
    expect(usage).toMatchObject({
      failedCalls: 1,
      unpricedCalls: 1,
      reserved: { tokens: 0 },
      total: { inputTokens: 300, outputTokens: 200, calls: 0 },
    });
    expect(usage.byRole.worker).toMatchObject({ inputTokens: 300, outputTokens: 200, calls: 0 });
    expect(usage.byTask.t1).toMatchObject({ inputTokens: 300, outputTokens: 200, calls: 0 });
    // The budget sees them: 500 used + 1000 estimated > 1000.
    expect(await store.reserve(sid, E, { maxTokens: 1000 }, LEASE_MS)).toMatchObject({
      granted: false,
    });
  });

  it('gives back the reservation of a call that never settles (its pod died) once its lease lapses', async () => {
    const sid = await session();
    const limits = { maxTokens: 2000 };
    // A call whose pod dies: reserved, never settled, on a short lease.
    const lost = await store.reserve(sid, E, limits, 200);
    const live = await store.reserve(sid, E, limits, LEASE_MS);
    expect(live.granted).toBe(true);
    await new Promise((r) => setTimeout(r, 400));
    // Without the lapse, 0 used + 2000 reserved + 1000 would be refused.
    const next = await store.reserve(sid, E, limits, LEASE_MS);
    expect(next).toMatchObject({ granted: true });
    expect(await store.read(sid)).toMatchObject({
      reserved: { tokens: 2000 },
      lapsedLeases: 1,
    });
    // A settlement of the lapsed call (it ran on after all) does not give its estimate back twice.
    await store.settle(sid, {
      reserved: heldBy(lost),
      role: 'worker',
      usage: noUsage,
      usdMicros: 0,
    });
    for (const outcome of [live, next]) {
      await store.settle(sid, {
        reserved: heldBy(outcome),
        role: 'worker',
        usage: noUsage,
        usdMicros: 0,
      });
    }
    expect((await store.read(sid)).reserved.tokens).toBe(0);
  });

  it('a read gives back lapsed reservations too (a session whose pods died shows none in flight)', async () => {
    const sid = await session();
    await store.reserve(sid, E, { maxTokens: 5000 }, 100);
    expect((await store.read(sid)).reserved.tokens).toBe(1000);
    await new Promise((r) => setTimeout(r, 300));
    expect((await store.read(sid)).reserved.tokens).toBe(0);
  });

  it('keeps refusing once refused, even a smaller estimate that would fit', async () => {
    const sid = await session();
    const limits = { maxTokens: 1500 };
    const granted = await store.reserve(sid, E, limits, LEASE_MS);
    await store.settle(sid, {
      reserved: heldBy(granted),
      role: 'worker',
      usage: { inputTokens: 500, outputTokens: 100 },
      usdMicros: 0,
    });
    expect(await store.reserve(sid, E, limits, LEASE_MS)).toMatchObject({
      granted: false,
      wait: false,
      alreadyExhausted: false,
    });
    // 600 used + 500 would fit, but the session already ran out.
    expect(await store.reserve(sid, { tokens: 500, usdMicros: 0 }, limits, LEASE_MS)).toMatchObject(
      { granted: false, limit: 'tokens', alreadyExhausted: true },
    );
    expect((await store.read(sid)).grants).toBe(1);
  });

  it('waits, then refuses, on the USD limit with tokens to spare', async () => {
    const sid = await session();
    const estimate = { tokens: 1000, usdMicros: 15_000 };
    const limits = { maxTokens: 1_000_000, maxUsdMicros: 20_000 };
    const first = await store.reserve(sid, estimate, limits, LEASE_MS);
    expect(first.granted).toBe(true);
    expect(await store.reserve(sid, estimate, limits, LEASE_MS)).toMatchObject({
      granted: false,
      wait: true,
      limit: 'usd',
      reservedUsdMicros: 15_000,
    });
    await store.settle(sid, {
      reserved: { ...estimate, ...(first.granted ? { lease: first.lease } : {}) },
      role: 'worker',
      usage: { inputTokens: 500, outputTokens: 500 },
      usdMicros: 10_000,
    });
    expect(await store.reserve(sid, estimate, limits, LEASE_MS)).toMatchObject({
      granted: false,
      wait: false,
      limit: 'usd',
      usedUsdMicros: 10_000,
    });
  });

  it('grants exactly limit / estimate of many reservations racing from several connections', async () => {
    const sid = await session();
    const stores = connections.map((c) => new UsageStore(c, prefix));
    const outcomes = await Promise.all(
      Array.from({ length: 40 }, (_, i) =>
        (stores[i % stores.length] as UsageStore).reserve(sid, E, { maxTokens: 7000 }, LEASE_MS),
      ),
    );
    expect(outcomes.filter((o) => o.granted)).toHaveLength(7);
    expect((await store.read(sid)).reserved.tokens).toBe(7000);
  });

  it('overspends at most (calls in flight) × (actual − reserved) when calls use more than they reserve', async () => {
    const sid = await session();
    const limit = 10_000;
    const actual = 1300; // each call uses 300 more than the 1000 it reserved
    const stores = connections.map((c) => new UsageStore(c, prefix));
    const caller = async (s: UsageStore) => {
      for (;;) {
        const outcome = await s.reserve(sid, E, { maxTokens: limit }, LEASE_MS);
        if (!outcome.granted && outcome.wait) {
          await new Promise((r) => setImmediate(r));
          continue;
        }
        if (!outcome.granted) return;
        await new Promise((r) => setImmediate(r));
        await s.settle(sid, {
          reserved: heldBy(outcome),
          role: 'worker',
          usage: { inputTokens: actual, outputTokens: 0 },
          usdMicros: 0,
        });
      }
    };
    await Promise.all(stores.map(caller));
    const usage = await store.read(sid);
    const used = usage.total.inputTokens + usage.total.outputTokens;
    expect(used).toBeLessThanOrEqual(limit + stores.length * (actual - E.tokens));
    expect(usage.reserved.tokens).toBe(0);
    // No reservation was granted after the first refusal.
    expect(usage.exhausted?.afterGrants).toBe(usage.grants);
    expect(usage.total.calls).toBe(usage.grants);
  });
});

describe('meteredModels', () => {
  const config = (input: unknown = {}): SessionConfigType => SessionConfig.parse(input);

  it('records each call under its role and task, with the USD of the role model', async () => {
    const sid = await session();
    const cfg = config({ budget: { prices: { builtin: { inputPerMTok: 3, outputPerMTok: 15 } } } });
    const inner = createBuiltinModels();
    const worker = meteredModels(inner, {
      usageStore: store,
      session: { id: sid, config: cfg },
      role: 'worker',
    });
    const result = await worker.execute({
      sessionId: sid,
      task: runningTask,
      attempt: 1,
      dependencyResults: [],
      instruction: 'Write the parser',
    });
    const usage = await store.read(sid);
    const { inputTokens, outputTokens } = result.tokenUsage;
    expect(inputTokens).toBeGreaterThan(0);
    expect(usage.byRole.worker).toEqual({
      inputTokens,
      outputTokens,
      usd: (inputTokens * 3 + outputTokens * 15) / 1e6,
      calls: 1,
    });
    expect(usage.byTask.t1?.calls).toBe(1);
    // Without a budget nothing is reserved.
    expect(usage.grants).toBe(0);
  });

  it('refuses a call that cannot reserve with BUDGET_EXHAUSTED and never reaches the model', async () => {
    const sid = await session();
    const cfg = config({ budget: { maxTokens: 500, reserveTokensPerCall: 1000 } });
    let called = 0;
    const inner = createBuiltinModels();
    const counting: RoleModels = {
      ...inner,
      label: inner.label,
      plan: (r) => ((called += 1), inner.plan(r)),
    };
    const planner = meteredModels(counting, {
      usageStore: store,
      session: { id: sid, config: cfg },
      role: 'planner',
    });
    const error = await planner
      .plan({ sessionId: sid, instruction: 'x', attempt: 0, requiredTerms: [], config: cfg })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OrqError);
    expect(error).toMatchObject({
      code: 'BUDGET_EXHAUSTED',
      details: { limit: 'tokens', role: 'planner' },
    });
    expect(called).toBe(0);
  });

  it('releases the reservation of a call that throws', async () => {
    const sid = await session();
    const cfg = config({ budget: { maxTokens: 10_000, reserveTokensPerCall: 1000 } });
    const inner = createBuiltinModels({ scenario: { plans: [{ error: 'provider down' }] } });
    const planner = meteredModels(inner, {
      usageStore: store,
      session: { id: sid, config: cfg },
      role: 'planner',
    });
    await expect(
      planner.plan({
        sessionId: sid,
        instruction: 'x',
        attempt: 0,
        requiredTerms: [],
        config: cfg,
      }),
    ).rejects.toThrow(/provider down/);
    expect(await store.read(sid)).toMatchObject({
      failedCalls: 1,
      grants: 1,
      reserved: { tokens: 0 },
    });
  });
});
