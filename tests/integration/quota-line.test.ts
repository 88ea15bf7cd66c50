import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import fc from 'fast-check';
import { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, describe, expect, it, inject } from 'vitest';
import { startTestRedis } from '../support/test-redis.js';
import { stopProcess, waitForOutput } from '../support/cli.js';
import { providerLimit } from '../../src/workers/llm/quota.js';
import { FairRelease } from '../../src/shared/fair-release.js';
import {
  lineClass,
  pathLead,
  RESERVED_REQUESTS,
  SESSION_CREDIT,
  SPARSE_CALLS,
} from '../../src/shared/quota-line.js';
import { answerOneTask } from '../support/fake-answers.js';
import { clusterPerTest } from '../support/cluster.js';
import { startFakeLlmServer, type FakeLlmServer } from '../support/fake-llm-server.js';
import { eventually } from '../support/scenarios.js';
import {
  QuotaStore,
  quotaKeys,
  type LineCaller,
  type QuotaSettings,
} from '../../src/shared/store/quota-store.js';

/**
 * The fair line of a provider limit (issue 46): calls that wait for the same limit are granted
 * in fair order, not in the order they come back. Two stores on two connections stand for two
 * pods. The limits hold one request at a time (a bucket of 1), so each refill grants one call.
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

function twoPods(lineGraceMs?: number): [QuotaStore, QuotaStore] {
  const prefix = `ql${randomUUID().slice(0, 8)}`;
  const options = lineGraceMs !== undefined ? { lineGraceMs } : {};
  return [new QuotaStore(connect(), prefix, options), new QuotaStore(connect(), prefix, options)];
}

const limitId = () => providerLimit('openai', undefined, randomUUID()).id;
/**
 * 300 a minute, 200 ms of it at once: one request, back 200 ms after it is taken, so a round of
 * every waiter asking once grants exactly one.
 */
const ONE_AT_A_TIME: QuotaSettings = { requestsPerMinute: 300, burstSeconds: 0.2 };

function caller(
  sessionId: string,
  n: number,
  options: {
    tenant?: string;
    step?: boolean;
    priority?: number;
    weight?: number;
    path?: number;
  } = {},
): LineCaller {
  return {
    callId: `${sessionId}|job${n}|0`,
    sessionId,
    tenant: options.tenant ?? 'default',
    lineClass: lineClass({ priority: options.priority ?? 5, step: options.step ?? false }),
    pathLead: pathLead(options.path),
    weight: options.weight ?? 1,
  };
}

/** Pauses the limit for a second (as a 429 does), so that every call asking meanwhile waits. */
async function drain(store: QuotaStore, id: string): Promise<void> {
  await store.pause(id, 1_000);
}

/** Until the bucket has its request back, so the next call's outcome is its rank's. */
async function refilled(
  store: QuotaStore,
  id: string,
  settings: QuotaSettings = ONE_AT_A_TIME,
): Promise<void> {
  while (((await store.read(id, settings)).requestsLeft ?? 0) < 1) await sleep(5);
}

/**
 * One round: the bucket refills, then the waiters ask in `order` until one is granted (the
 * bucket holds one). Returns the one granted. The round stops there: on a busy machine the asks
 * can outlast the 200 ms refill, and a second grant in the same round would go unrecorded (its
 * call then asked again as a new one, behind the line).
 */
async function round(
  store: QuotaStore,
  id: string,
  order: readonly LineCaller[],
): Promise<LineCaller | undefined> {
  await refilled(store, id);
  for (const call of order) {
    const outcome = await store.acquire(id, ONE_AT_A_TIME, 0, randomUUID(), 10_000, call);
    if (outcome.granted) return call;
  }
  return undefined;
}

describe('the fair line of a limit', () => {
  it("grants a late small session's call before the backlog of a big session that asks first", async () => {
    const [a, b] = twoPods();
    const id = limitId();
    await drain(a, id);
    const big = Array.from({ length: 20 }, (_, i) => caller('big', i));
    for (const call of big) {
      expect(await a.acquire(id, ONE_AT_A_TIME, 0, randomUUID(), 10_000, call)).toMatchObject({
        granted: false,
      });
    }
    // Submitted once the backlog waits: its call joins the line at the backlog's next turn.
    const small = caller('small', 0);
    const joined = await b.acquire(id, ONE_AT_A_TIME, 0, randomUUID(), 10_000, small);
    expect(joined).toMatchObject({ granted: false });
    expect(joined.granted === false && joined.place).toBeLessThanOrEqual(2);
    // The backlog comes back first every time (it retries more often): the small call still
    // goes within its first two rounds, not after twenty.
    const winners: string[] = [];
    for (let i = 0; i < 2; i += 1) {
      const winner = await round(a, id, [...big.filter((c) => !winners.includes(c.callId)), small]);
      winners.push(winner?.callId ?? 'none');
    }
    expect(winners).toContain(small.callId);
  });

  it('grants every call of the backlog in its order, whatever order they come back in', async () => {
    const [a] = twoPods();
    const id = limitId();
    await drain(a, id);
    const calls = Array.from({ length: 6 }, (_, i) => caller('s', i));
    for (const call of calls) await a.acquire(id, ONE_AT_A_TIME, 0, randomUUID(), 10_000, call);
    const granted: string[] = [];
    let waiting = [...calls];
    while (waiting.length > 0) {
      const winner = await round(a, id, [...waiting].reverse());
      expect(winner).toBeDefined();
      granted.push(winner?.callId ?? '');
      waiting = waiting.filter((c) => c !== winner);
    }
    expect(granted).toEqual(calls.map((c) => c.callId));
  });

  it('keeps calls one tag apart in order in every band, not only by their ids', async () => {
    const [a] = twoPods();
    const id = limitId();
    await drain(a, id);
    for (const priority of [1, 5, 9]) {
      // The second call's id sorts first: only its rank can put it second.
      const first = { ...caller('s', 0, { priority }), callId: `z${priority}` };
      const second = { ...caller('s', 1, { priority }), callId: `a${priority}` };
      await a.acquire(id, ONE_AT_A_TIME, 0, randomUUID(), 10_000, first);
      const outcome = await a.acquire(id, ONE_AT_A_TIME, 0, randomUUID(), 10_000, second);
      expect(outcome.granted === false && outcome.place).toBe(2);
      await a.leave(id, [first.callId, second.callId]);
    }
  });

  it('serves plan steps before task work, and a higher priority before both', async () => {
    const [a] = twoPods();
    const id = limitId();
    await drain(a, id);
    const task = caller('s1', 0);
    const step = caller('s2', 0, { step: true });
    const urgent = caller('s3', 0, { priority: 8 });
    for (const call of [task, step, urgent]) {
      await a.acquire(id, ONE_AT_A_TIME, 0, randomUUID(), 10_000, call);
    }
    const order: string[] = [];
    let waiting = [task, step, urgent];
    while (waiting.length > 0) {
      const winner = await round(a, id, waiting);
      order.push(winner?.callId ?? '');
      waiting = waiting.filter((c) => c !== winner);
    }
    expect(order).toEqual([urgent.callId, step.callId, task.callId]);
  });

  it('shares the limit equally between tenants, however many sessions each has', async () => {
    const [a] = twoPods();
    const id = limitId();
    await drain(a, id);
    // Tenant A: 4 sessions with 8 calls each; tenant B: 1 session with 12, its calls joining
    // after A's each time.
    const aCalls = Array.from({ length: 4 }, (_, s) =>
      Array.from({ length: 8 }, (_, i) => caller(`a${s}`, i, { tenant: 'A' })),
    );
    const bCalls = Array.from({ length: 12 }, (_, i) => caller('b', i, { tenant: 'B' }));
    for (let i = 0; i < 12; i += 1) {
      for (const call of [...aCalls.map((calls) => calls[i]), bCalls[i]]) {
        if (call) await a.acquire(id, ONE_AT_A_TIME, 0, randomUUID(), 10_000, call);
      }
    }
    // A's calls ask first every round.
    let waiting = [...aCalls.flat(), ...bCalls];
    let toB = 0;
    for (let i = 0; i < 20; i += 1) {
      const winner = await round(a, id, waiting);
      if (winner?.tenant === 'B') toB += 1;
      waiting = waiting.filter((c) => c !== winner);
    }
    // Equal shares: B gets close to half of the grants (8 of 20: every new session's first
    // call starts level), not a fifth or, in asking order, none.
    expect(toB).toBeGreaterThanOrEqual(7);
  });

  it("gives a tenant its weight's share of the line", async () => {
    const [a] = twoPods();
    const id = limitId();
    await drain(a, id);
    const heavy = Array.from({ length: 12 }, (_, i) => caller('h', i, { tenant: 'H', weight: 3 }));
    const light = Array.from({ length: 12 }, (_, i) => caller('l', i, { tenant: 'L' }));
    for (let i = 0; i < 12; i += 1) {
      for (const call of [light[i], heavy[i]]) {
        await a.acquire(id, ONE_AT_A_TIME, 0, randomUUID(), 10_000, call as LineCaller);
      }
    }
    // The light tenant's calls ask first every round.
    let waiting = [...light, ...heavy];
    let toHeavy = 0;
    for (let i = 0; i < 8; i += 1) {
      const winner = await round(a, id, waiting);
      if (winner?.tenant === 'H') toHeavy += 1;
      waiting = waiting.filter((c) => c !== winner);
    }
    // Weight 3 against 1: three grants in four (6 of 8), not half (4).
    expect(toHeavy).toBeGreaterThanOrEqual(5);
  });

  it("lets a call on a long critical path go ahead of its session's leaves, a few at most", async () => {
    const [a] = twoPods();
    const id = limitId();
    await drain(a, id);
    const leaves = Array.from({ length: 3 }, (_, i) => caller('s', i));
    const chain = caller('s', 9, { path: 1024 });
    for (const call of [...leaves, chain]) {
      await a.acquire(id, ONE_AT_A_TIME, 0, randomUUID(), 10_000, call);
    }
    expect(await round(a, id, [...leaves, chain])).toEqual(chain);
  });
});

describe('a session that arrives while a backlog binds the limit', () => {
  it('has its first calls granted ahead of the backlog while few of them wait, up to its credit, then shares', async () => {
    const [a] = twoPods();
    const id = limitId();
    await drain(a, id);
    const big = Array.from({ length: 40 }, (_, i) => caller('big', i));
    for (const call of big) await a.acquire(id, ONE_AT_A_TIME, 0, randomUUID(), 10_000, call);
    // The backlog has had its credit: it is served level with V from here.
    let waiting = [...big];
    for (let i = 0; i < SESSION_CREDIT + 2; i += 1) {
      const winner = await round(a, id, waiting);
      waiting = waiting.filter((c) => c !== winner);
    }
    // A sparse session: its calls join a few at a time, fewer than SPARSE_CALLS waiting at once.
    const wave = SPARSE_CALLS - 1;
    const small = Array.from({ length: 6 * wave }, (_, i) => caller('small', i));
    const winners: string[] = [];
    for (let w = 0; w < 6; w += 1) {
      const joining = small.slice(w * wave, (w + 1) * wave);
      for (const call of joining) {
        await a.acquire(id, ONE_AT_A_TIME, 0, randomUUID(), 10_000, call);
      }
      waiting = [...waiting, ...joining];
      for (let i = 0; i < wave; i += 1) {
        // The backlog asks first every round.
        const winner = await round(a, id, waiting);
        winners.push(winner?.sessionId ?? 'none');
        waiting = waiting.filter((c) => c !== winner);
      }
    }
    // Its credit (SESSION_CREDIT tag units at 2 a call: its tenant has 2 sessions at the line)
    // goes first: without it, the newcomer would get every other grant from the start.
    const credit = SESSION_CREDIT / 2;
    expect(winners.slice(0, credit)).toEqual(Array(credit).fill('small'));
    // Bounded: then the backlog gets its share again.
    expect(winners.slice(credit).filter((w) => w === 'big').length).toBeGreaterThanOrEqual(2);
  });

  it('has no credit past its first few calls if it joins with a backlog of its own', async () => {
    const [a] = twoPods();
    const id = limitId();
    await drain(a, id);
    // A big session joins with 30 calls at once: a backlog, not a sparse flow.
    const big = Array.from({ length: 30 }, (_, i) => caller('big', i));
    for (const call of big) await a.acquire(id, ONE_AT_A_TIME, 0, randomUUID(), 10_000, call);
    // Its first SPARSE_CALLS calls, which joined while few of its calls waited, are served...
    let waiting = [...big];
    for (let i = 0; i < SPARSE_CALLS + 1; i += 1) {
      const winner = await round(a, id, waiting);
      waiting = waiting.filter((c) => c !== winner);
    }
    // ...and a sparse session joining now goes ahead of all the rest, which waits level with V.
    // (With the big session's credit still running, its 4th call would go behind one of them.)
    const places: number[] = [];
    for (const call of Array.from({ length: SPARSE_CALLS }, (_, i) => caller('small', i))) {
      const outcome = await a.acquire(id, ONE_AT_A_TIME, 0, randomUUID(), 10_000, call);
      places.push(outcome.granted ? 0 : outcome.place);
    }
    expect(places).toEqual([1, 2, 3, 4]);
  });

  it('keeps its credit while its calls are served or leave, as long as few wait at once', async () => {
    const [a] = twoPods();
    const id = limitId();
    await drain(a, id);
    // A backlog that has spent its credit.
    const big = Array.from({ length: 30 }, (_, i) => caller('big', i));
    for (const call of big) await a.acquire(id, ONE_AT_A_TIME, 0, randomUUID(), 10_000, call);
    let waiting = [...big];
    for (let i = 0; i < SPARSE_CALLS + 1; i += 1) {
      const winner = await round(a, id, waiting);
      waiting = waiting.filter((c) => c !== winner);
    }
    // A session whose calls come three at a time: the first three are served, the next three
    // leave the line (their job ended), and with 6 calls behind it none of it waits now.
    const wave = SPARSE_CALLS - 1;
    const small = Array.from({ length: 3 * wave }, (_, i) => caller('small', i));
    const first = small.slice(0, wave);
    for (const call of first) await a.acquire(id, ONE_AT_A_TIME, 0, randomUUID(), 10_000, call);
    waiting = [...waiting, ...first];
    for (let i = 0; i < wave; i += 1) {
      const winner = await round(a, id, waiting);
      expect(winner?.sessionId).toBe('small');
      waiting = waiting.filter((c) => c !== winner);
    }
    const leaving = small.slice(wave, 2 * wave);
    for (const call of leaving) await a.acquire(id, ONE_AT_A_TIME, 0, randomUUID(), 10_000, call);
    await a.leave(
      id,
      leaving.map((c) => c.callId),
    );
    // Its third wave is still sparse: it goes ahead of the backlog (counting the calls that were
    // served or left as waiting, it would be tagged level with V, behind the backlog's next).
    const places: number[] = [];
    for (const call of small.slice(2 * wave)) {
      const outcome = await a.acquire(id, ONE_AT_A_TIME, 0, randomUUID(), 10_000, call);
      places.push(outcome.granted ? 0 : outcome.place);
    }
    expect(places).toEqual([1, 2, 3]);
  });

  it("finds the bucket's last requests kept for it, which the backlog cannot take", async () => {
    const [a] = twoPods();
    const id = limitId();
    // 20 a second, 16 at once: RESERVED_REQUESTS of them are kept.
    const settings: QuotaSettings = { requestsPerMinute: 1_200, burstSeconds: 0.8 };
    // A backlog that has spent its credit: its calls wait level with V or later.
    await a.pause(id, 1_500);
    const big = Array.from({ length: 200 }, (_, i) => caller('big', i));
    for (const call of big) await a.acquire(id, settings, 0, randomUUID(), 10_000, call);
    let waiting = [...big];
    let granted = 0;
    const deadline = Date.now() + 10_000;
    // The backlog asks again and again until it is held at the reserve (its credit spent).
    while (granted < SESSION_CREDIT + 8 && Date.now() < deadline) {
      for (const call of waiting.slice(0, 4)) {
        if ((await a.acquire(id, settings, 0, randomUUID(), 10_000, call)).granted) {
          granted += 1;
          waiting = waiting.filter((c) => c !== call);
        }
      }
      await sleep(10);
    }
    expect(granted).toBeGreaterThanOrEqual(SESSION_CREDIT + 8);
    await sleep(300);
    for (const call of waiting.slice(0, 4)) {
      await a.acquire(id, settings, 0, randomUUID(), 10_000, call);
    }
    // The backlog stops with the reserve left in the bucket...
    expect((await a.read(id, settings)).requestsLeft).toBeGreaterThanOrEqual(RESERVED_REQUESTS - 1);
    // ...which a newcomer's calls take at once, as if it were alone.
    const small = Array.from({ length: RESERVED_REQUESTS - 1 }, (_, i) => caller('small', i));
    for (const call of small) {
      expect(await a.acquire(id, settings, 0, randomUUID(), 10_000, call)).toEqual({
        granted: true,
      });
    }
  });

  it('counts a session for its tenant only while it waits, not for a minute after', async () => {
    const [a] = twoPods();
    const id = limitId();
    await drain(a, id);
    // Tenant A's first session waits, is served and leaves the line.
    const early = caller('a-early', 0, { tenant: 'A' });
    await a.acquire(id, ONE_AT_A_TIME, 0, randomUUID(), 10_000, early);
    expect(await round(a, id, [early])).toEqual(early);
    await sleep(1_500);
    // Then A's second session and B's one wait with backlogs: one each, alternately, as if the
    // early session had never been (counted, it would halve A's share: one in three).
    const late = Array.from({ length: 12 }, (_, i) => caller('a-late', i, { tenant: 'A' }));
    const b = Array.from({ length: 12 }, (_, i) => caller('b', i, { tenant: 'B' }));
    await drain(a, id);
    for (let i = 0; i < 12; i += 1) {
      for (const call of [late[i], b[i]] as LineCaller[]) {
        await a.acquire(id, ONE_AT_A_TIME, 0, randomUUID(), 10_000, call);
      }
    }
    let waiting = [...late, ...b];
    let toA = 0;
    for (let i = 0; i < 20; i += 1) {
      const winner = await round(a, id, waiting);
      if (winner?.tenant === 'A') toA += 1;
      waiting = waiting.filter((c) => c !== winner);
    }
    expect(toA).toBeGreaterThanOrEqual(9);
  });
});

describe('no call starves within its band', () => {
  /** 50 a second, one at a time: a refill every 20 ms. */
  const FAST_ONE: QuotaSettings = { requestsPerMinute: 3_000, burstSeconds: 0.02 };
  const tenants = ['A', 'B', 'C'] as const;
  /** Another session of the band: its tenant, and when (round) how many of its calls join. */
  const sessionArb = fc.record({
    tenant: fc.constantFrom(...tenants),
    joins: fc.array(fc.record({ round: fc.nat(12), calls: fc.integer({ min: 1, max: 8 }) }), {
      minLength: 1,
      maxLength: 3,
    }),
  });

  it('a newcomer waits at most for the calls ahead of it when it joined, and one tie per session joining later', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(sessionArb, { minLength: 1, maxLength: 5 }),
        fc.record({ A: fc.integer({ min: 1, max: 3 }), B: fc.constant(1), C: fc.constant(2) }),
        fc.nat(8),
        fc.infiniteStream(fc.nat()),
        async (others, weights, joinsAt, shuffle) => {
          const [store] = twoPods();
          const id = limitId();
          await store.pause(id, 100);
          const numbered = new Map<string, number>();
          const callOf = (sessionId: string, tenant: (typeof tenants)[number]) => {
            const n = numbered.get(sessionId) ?? 0;
            numbered.set(sessionId, n + 1);
            return caller(sessionId, n, { tenant, weight: weights[tenant] });
          };
          const x = callOf('x', 'A');
          let waiting: LineCaller[] = [];
          let placeAtJoin: number | undefined;
          let othersGranted = 0;
          const joinedAfter = new Set<string>();
          for (let round = 0; round < 200; round += 1) {
            for (const [i, session] of others.entries()) {
              for (const join of session.joins.filter((j) => j.round === round)) {
                for (let c = 0; c < join.calls; c += 1) {
                  const call = callOf(`s${i}`, session.tenant);
                  await store.acquire(id, FAST_ONE, 0, randomUUID(), 10_000, call);
                  waiting.push(call);
                  if (placeAtJoin !== undefined) joinedAfter.add(call.sessionId);
                }
              }
            }
            if (round === joinsAt) {
              const joined = await store.acquire(id, FAST_ONE, 0, randomUUID(), 10_000, x);
              placeAtJoin = joined.granted ? 1 : joined.place;
              if (joined.granted) break;
              waiting.push(x);
            }
            if (waiting.length === 0) {
              if (placeAtJoin !== undefined) break;
              continue;
            }
            await refilled(store, id, FAST_ONE);
            // Every waiter asks once, in an order the property picks.
            const order = [...waiting].sort(() => ((shuffle.next().value as number) % 3) - 1);
            const granted: LineCaller[] = [];
            for (const call of order) {
              const outcome = await store.acquire(id, FAST_ONE, 0, randomUUID(), 10_000, call);
              if (outcome.granted) granted.push(call);
            }
            waiting = waiting.filter((c) => !granted.includes(c));
            if (placeAtJoin === undefined) continue;
            if (granted.includes(x)) break;
            othersGranted += granted.length;
          }
          expect(waiting).not.toContain(x);
          expect(othersGranted).toBeLessThanOrEqual((placeAtJoin ?? 1) - 1 + joinedAfter.size);
        },
      ),
      { numRuns: 12 },
    );
  }, 120_000);
});

describe('calls handed back to wait', () => {
  /**
   * 10 a second: a request every 100 ms, up to 10 at once (so a waiter back late does not make
   * those behind it late too: the bucket keeps filling for them).
   */
  const TENTH: QuotaSettings = { requestsPerMinute: 600, burstSeconds: 1 };

  it('are each told to come back about when their turn comes, later the further back', async () => {
    const [a] = twoPods();
    const id = limitId();
    await a.pause(id, 500);
    /** When each call is told its turn comes (ms, this clock). */
    const turns: number[] = [];
    for (let i = 0; i < 20; i += 1) {
      const asked = Date.now();
      const outcome = await a.acquire(id, TENTH, 0, randomUUID(), 10_000, caller('s', i));
      if (outcome.granted) throw new Error('granted during a pause');
      turns.push(asked + outcome.waitMs);
    }
    // One request's time (100 ms) later for each place further back, not one time for all
    // (give or take this process's own delays in reaching Redis, under 50 ms).
    for (let i = 1; i < turns.length; i += 1) {
      expect((turns[i] ?? 0) - (turns[i - 1] ?? 0)).toBeGreaterThanOrEqual(50);
    }
    expect((turns.at(-1) ?? 0) - (turns[0] ?? 0)).toBeGreaterThanOrEqual(1_800);
  });

  it('come back one by one, each near its turn: no stampede of retries', async () => {
    const [a] = twoPods();
    const id = limitId();
    await a.pause(id, 300);
    const calls = Array.from({ length: 30 }, (_, i) => caller('s', i));
    let asks = 0;
    // Each waiter does what a handed-back job does: it comes back when told, and asks again.
    await Promise.all(
      calls.map(async (call) => {
        for (;;) {
          asks += 1;
          const outcome = await a.acquire(id, TENTH, 0, randomUUID(), 10_000, call);
          if (outcome.granted) return;
          await sleep(outcome.waitMs);
        }
      }),
    );
    // 30 first asks, and a few more for a waiter back before the one ahead of it was granted
    // (one back late shifts those behind it by a turn; 70-88 asks in all at load 9-12);
    // waiters all told the same short wait asked 470-529 times.
    expect(asks).toBeLessThanOrEqual(120);
    expect((await a.line(id)).entries).toEqual([]);
  });
});

describe('a call with a large token estimate', () => {
  /** 100 tokens a second, a bucket of 100 (1 s); no request limit. */
  const TOKENS: QuotaSettings = { tokensPerMinute: 6_000, burstSeconds: 1 };

  /** Takes every token in the bucket, as a call that just started would. */
  async function emptyTokens(store: QuotaStore, id: string): Promise<void> {
    expect(await store.acquire(id, TOKENS, 100, randomUUID(), 10_000)).toEqual({ granted: true });
  }

  it('is not starved by small calls behind it: the tokens build up for it, and it goes first', async () => {
    const [a, b] = twoPods();
    const id = limitId();
    await emptyTokens(a, id);
    // One session's calls: the large one first, the small ones ranked behind it.
    const big = caller('s', 0);
    const joined = await a.acquire(id, TOKENS, 80, randomUUID(), 10_000, big);
    expect(joined).toMatchObject({ granted: false, reason: 'tokens', place: 1 });
    const small = Array.from({ length: 4 }, (_, i) => caller('s', i + 1));
    for (const call of small) await b.acquire(id, TOKENS, 10, randomUUID(), 10_000, call);
    // The small calls ask again and again while the bucket refills: enough for each of them
    // comes after 100 ms, but not one passes the large call ahead of them.
    const order: string[] = [];
    let waiting = [...small];
    const bigTurn = Date.now() + (joined.granted ? 0 : joined.waitMs);
    while (Date.now() < bigTurn) {
      for (const call of waiting) {
        if ((await b.acquire(id, TOKENS, 10, randomUUID(), 10_000, call)).granted) {
          order.push(call.callId);
        }
      }
      waiting = waiting.filter((c) => !order.includes(c.callId));
      await sleep(20);
    }
    await eventually(
      async () =>
        (await a.acquire(id, TOKENS, 80, randomUUID(), 10_000, big)).granted ? true : undefined,
      'the large call to be granted',
    );
    order.push(big.callId);
    expect(order[0]).toBe(big.callId);
  });

  it('holds the line up no longer than a full bucket takes, however large it is', async () => {
    const [a] = twoPods();
    const id = limitId();
    await emptyTokens(a, id);
    // Ten buckets' worth: it waits for one full bucket (1 s), then runs into debt.
    const huge = caller('huge', 0);
    const joined = await a.acquire(id, TOKENS, 1_000, randomUUID(), 10_000, huge);
    expect(joined).toMatchObject({ granted: false, reason: 'tokens' });
    expect(joined.granted === false && joined.waitMs).toBeLessThanOrEqual(1_000);
    const granted = await eventually(
      async () =>
        (await a.acquire(id, TOKENS, 1_000, randomUUID(), 10_000, huge)).granted ? true : undefined,
      'the huge call to be granted',
    );
    expect(granted).toBe(true);
    expect((await a.line(id)).entries).toEqual([]);
  });
});

describe('nothing stuck in the line', () => {
  it('a waiter that never comes back (its pod killed) gives its place up when its lease lapses', async () => {
    const [a, b] = twoPods(1_000);
    const id = limitId();
    await drain(a, id);
    const dead = caller('s1', 0);
    const alive = caller('s2', 0);
    await a.acquire(id, ONE_AT_A_TIME, 0, randomUUID(), 10_000, dead);
    await b.acquire(id, ONE_AT_A_TIME, 0, randomUUID(), 10_000, alive);
    // `dead` is ahead and never asks again: while its lease holds, `alive` waits behind it.
    await refilled(b, id);
    expect((await b.acquire(id, ONE_AT_A_TIME, 0, randomUUID(), 10_000, alive)).granted).toBe(
      false,
    );
    expect((await b.line(id)).entries.map((e) => e.callId)).toContain(dead.callId);
    // Its lease (its turn plus the grace) lapses: the line moves on.
    let granted = false;
    for (let i = 0; i < 200 && !granted; i += 1) {
      await sleep(20);
      granted = (await b.acquire(id, ONE_AT_A_TIME, 0, randomUUID(), 10_000, alive)).granted;
    }
    expect(granted).toBe(true);
    expect((await b.line(id)).entries).toEqual([]);
  });

  it('a call that leaves (its job cancelled or done) no longer holds anyone up', async () => {
    const [a] = twoPods();
    const id = limitId();
    await drain(a, id);
    const gone = caller('s1', 0);
    const next = caller('s2', 0);
    await a.acquire(id, ONE_AT_A_TIME, 0, randomUUID(), 10_000, gone);
    await a.acquire(id, ONE_AT_A_TIME, 0, randomUUID(), 10_000, next);
    expect(await a.leave(id, [gone.callId])).toBe(1);
    await refilled(a, id);
    expect((await a.acquire(id, ONE_AT_A_TIME, 0, randomUUID(), 10_000, next)).granted).toBe(true);
  });

  it('a session that ends leaves at once with all its calls, and no longer counts for its tenant', async () => {
    const [a, b] = twoPods();
    const id = limitId();
    await drain(a, id);
    // Tenant A: a session that will end, with 10 calls waiting (it would count for its tenant
    // until a second past the last one's turn, 2 s off), and one that goes on.
    const ending = Array.from({ length: 10 }, (_, i) => caller('ending', i, { tenant: 'A' }));
    for (const call of ending) await a.acquire(id, ONE_AT_A_TIME, 0, randomUUID(), 10_000, call);
    const goesOn = [0, 1, 2].map((i) => caller('goes-on', i, { tenant: 'A' }));
    await b.acquire(id, ONE_AT_A_TIME, 0, randomUUID(), 10_000, goesOn[0] as LineCaller);
    expect(await b.leaveSession(id, 'ending')).toBe(10);
    expect((await b.line(id)).entries.map((e) => e.callId)).toEqual([goesOn[0]?.callId]);
    // The session that goes on is its tenant's only one now: its next calls are a tag apart.
    for (const call of goesOn.slice(1)) {
      await b.acquire(id, ONE_AT_A_TIME, 0, randomUUID(), 10_000, call);
    }
    const waiters = await connect().hgetall(quotaKeys(b.prefix, id).waiters);
    const tag = (call: LineCaller | undefined) =>
      Number((waiters[call?.callId ?? ''] ?? '').split('|')[0]);
    expect(tag(goesOn[2]) - tag(goesOn[1])).toBe(1);
  });

  it("shows the line by tenant and session, with each session's first place", async () => {
    const [a] = twoPods();
    const id = limitId();
    await drain(a, id);
    for (const call of [caller('s1', 0), caller('s1', 1), caller('s2', 0, { tenant: 'B' })]) {
      await a.acquire(id, ONE_AT_A_TIME, 0, randomUUID(), 10_000, call);
    }
    const { entries } = await a.line(id);
    expect(entries.map((e) => [e.sessionId, e.tenant])).toEqual([
      ['s1', 'default'],
      ['s2', 'B'],
      ['s1', 'default'],
    ]);
    // What orq status, GET /quotas, client.quotas() and /metrics show.
    await a.register(id, { name: 'the limit', rateLimit: ONE_AT_A_TIME });
    const [view] = await a.report();
    expect(view).toMatchObject({
      waiting: 3,
      line: [
        { tenant: 'default', waiting: 2, sessions: [{ sessionId: 's1', waiting: 2, place: 1 }] },
        { tenant: 'B', waiting: 1, sessions: [{ sessionId: 's2', waiting: 1, place: 2 }] },
      ],
    });
  });
});

describe('a pod killed with kill -9 while its call waits in the line', () => {
  let child: ReturnType<typeof spawn> | undefined;
  afterEach(async () => {
    if (child) await stopProcess(child, 'SIGKILL');
  });

  it('gives its place up when the lease lapses, and the line moves on', async () => {
    const [store] = twoPods();
    const id = limitId();
    const fixture = fileURLToPath(new URL('../fixtures/hold-quota-place.ts', import.meta.url));
    child = spawn(
      process.execPath,
      ['--import', 'tsx', fixture, inject('redisUrl'), store.prefix, id, '1000'],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    await waitForOutput(child, 'waiting', 30_000);
    child.kill('SIGKILL');
    const settings: QuotaSettings = { requestsPerMinute: 60, burstSeconds: 1 };
    const next = caller('s', 0);
    // Behind the dead pod's call at first, though that call never asks again.
    expect(await store.acquire(id, settings, 0, randomUUID(), 10_000, next)).toMatchObject({
      granted: false,
      place: 2,
    });
    await eventually(
      async () =>
        (await store.acquire(id, settings, 0, randomUUID(), 10_000, next)).granted
          ? true
          : undefined,
      "the killed pod's place to lapse",
    );
    expect((await store.line(id)).entries).toEqual([]);
  });
});

describe('the line through a Redis restart (AOF)', () => {
  it('keeps every waiter and its place', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'orq-line-restart-'));
    const redis = await startTestRedis({ dir, appendonly: true });
    const connection = new Redis(redis.url);
    try {
      const store = new QuotaStore(connection, 'r');
      const id = limitId();
      await store.pause(id, 2_000);
      const calls = [caller('a', 0), caller('b', 0, { step: true }), caller('a', 1)];
      for (const call of calls) await store.acquire(id, ONE_AT_A_TIME, 0, randomUUID(), 1, call);
      const before = (await store.line(id)).entries.map((e) => e.callId);
      expect(before).toEqual([calls[1]?.callId, calls[0]?.callId, calls[2]?.callId]);
      await redis.stop();
      await redis.start();
      const after = await eventually(
        () => store.line(id).catch(() => undefined),
        'the store to reach the restarted Redis',
        20_000,
      );
      expect(after.entries.map((e) => e.callId)).toEqual(before);
      // And the head is served first, whoever asks first.
      expect(await round(store, id, [...calls].reverse())).toEqual(calls[1]);
    } finally {
      connection.disconnect();
      await redis.stop();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('a job whose call waits in the line', () => {
  const startCluster = clusterPerTest();
  const KEY = 'sk-line-test';
  let server: FakeLlmServer;
  beforeAll(async () => {
    process.env.LINE_TEST_KEY = KEY;
    server = await startFakeLlmServer('openai', answerOneTask);
  });
  afterAll(() => server.close());

  it('shows its place in its progress and in client.quotas() under its tenant, and leaves the line when its session is cancelled', async () => {
    const cluster = await startCluster();
    // 6 a minute: its turn, 4th in line, is 40 s off; it leaves long before it comes back.
    const rateLimit = { requestsPerMinute: 6, burstSeconds: 10 };
    const limit = providerLimit('openai', server.baseUrl, KEY);
    // Three urgent calls of another process wait ahead and never come back (their lease is long).
    const other = new QuotaStore(connect(), cluster.prefix);
    await other.acquire(limit.id, rateLimit, 0, 'drain', 10_000);
    for (let i = 0; i < 3; i += 1) {
      const urgent = caller('other', i, { priority: 9, step: true });
      await other.acquire(limit.id, rateLimit, 0, randomUUID(), 10_000, urgent);
    }
    const session = await cluster.client.submit({
      instruction: 'write the parser',
      tenant: 'acme',
      config: {
        llm: {
          default: {
            provider: 'openai',
            baseUrl: server.baseUrl,
            model: 'test',
            apiKeyEnv: 'LINE_TEST_KEY',
            rateLimit,
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
      activity: `waiting for quota (${limit.name}), place 4`,
      place: 4,
    });
    const callId = `${delayed.id ?? ''}|0`;
    expect((await other.line(limit.id)).entries.map((e) => e.callId)).toContain(callId);
    // What orq status, GET /quotas and /metrics read: the line by tenant, then by session.
    const quota = (await cluster.client.quotas()).find((q) => q.id === limit.id);
    expect(quota?.waiting).toBe(4);
    expect(quota?.line).toEqual([
      {
        tenant: 'default',
        waiting: 3,
        oldestWaitMs: expect.any(Number) as number,
        sessions: [{ sessionId: 'other', waiting: 3, place: 1 }],
      },
      {
        tenant: 'acme',
        waiting: 1,
        oldestWaitMs: expect.any(Number) as number,
        sessions: [{ sessionId: session.id, waiting: 1, place: 4 }],
      },
    ]);
    const [others, acme] = quota?.line ?? [];
    expect(others?.oldestWaitMs).toBeGreaterThanOrEqual(acme?.oldestWaitMs ?? 0);
    await cluster.client.cancel(session.id);
    // The session's end is announced and the pod takes its calls out of the line, without
    // waiting for the job to come back at its turn (when it would find its session over).
    await eventually(
      async () =>
        (await other.line(limit.id)).entries.some((e) => e.callId === callId) ? undefined : true,
      'the cancelled job to leave the line',
      15_000,
    );
    expect(server.requests).toHaveLength(0);
  });
});

describe('tenant weights in fair release', () => {
  it("give a tenant of weight 3 three jobs' places for another's one", async () => {
    const fair = new FairRelease(connect(), `fw${randomUUID().slice(0, 8)}`, Date.now, { acme: 3 });
    const acme = await fair.release('s-acme', 'acme', 6);
    const beta = await fair.release('s-beta', 'beta', 2);
    // Both start level; acme's jobs are a third of a place apart, beta's a whole one.
    expect(acme.map((j) => Number(j.lead.toFixed(3)))).toEqual([0, 0.333, 0.667, 1, 1.333, 1.667]);
    expect(beta.map((j) => j.lead)).toEqual([0, 1]);
    // Queue order by lead: three of acme's jobs before beta's second.
    const ahead = acme.filter((j) => j.lead < (beta[1]?.lead ?? 0));
    expect(ahead).toHaveLength(3);
  });
});
