import { afterAll, describe, expect, it } from 'vitest';
import type { TokenUsage } from '../../src/shared/domain/task.js';
import { OrqError } from '../../src/shared/errors.js';
import { withUsageSpent } from '../../src/workers/llm/chat.js';
import { BudgetWaitError, createMeter } from '../../src/workers/llm/metered.js';
import type { ReserveTurn } from '../../src/workers/llm/types.js';
import { UsageStore } from '../../src/shared/store/usage-store.js';
import { makeSession, openStore, recordSession } from '../support/executors.js';

/**
 * A repair turn sends the prompt again with the bad reply and the correction: under a budget it
 * reserves what it adds before it is sent (issue 34: a budget is passed by one call's worth at
 * most). The call here is scripted: a first turn that spent `spent`, then a repair turn.
 */
const db = openStore();
afterAll(() => db.close());

async function callWithRepair(maxTokens: number, spent: TokenUsage, inFlight = 0) {
  const session = makeSession({ budget: { maxTokens } });
  await recordSession(db.store, session);
  const usageStore = new UsageStore(db.redis, db.store.prefix);
  const meter = createMeter({ usageStore, session, role: 'planner' });
  const estimate = async () => ({ inputTokens: 1_000, maxOutputTokens: 1_000 });
  // Another call of the session in flight, holding its reservation meanwhile.
  let release: () => void = () => undefined;
  const other =
    inFlight > 0
      ? meter.withReservation(
          { method: 'plan', estimate: async () => ({ inputTokens: inFlight, maxOutputTokens: 0 }) },
          () => new Promise<{ usage: TokenUsage }>((r) => (release = () => r({ usage: spent }))),
          (reply) => reply.usage,
        )
      : undefined;
  let turns = 0;
  const call = meter.withReservation(
    { method: 'plan', estimate },
    async (reserveTurn?: ReserveTurn) => {
      turns += 1; // the first turn: sent, and `spent` billed
      try {
        await reserveTurn?.({ inputTokens: 2_500, maxOutputTokens: 1_000 }, spent);
      } catch (error) {
        throw withUsageSpent(error, spent);
      }
      turns += 1; // the repair turn: sent
      return {
        usage: { inputTokens: spent.inputTokens * 2, outputTokens: spent.outputTokens * 2 },
      };
    },
    (reply) => reply.usage,
  );
  const outcome = await call.then(
    () => undefined,
    (error: unknown) => error,
  );
  release();
  await other;
  return { outcome, turns, usage: await usageStore.read(session.id) };
}

describe('a repair turn under a budget', () => {
  it('is not sent when it would pass the budget: the call ends with what its first turn spent', async () => {
    // Holds 2,000 for the first turn; spent 1,800; the repair turn adds 3,500: 5,300 > 5,000.
    const { outcome, turns, usage } = await callWithRepair(5_000, {
      inputTokens: 1_000,
      outputTokens: 800,
    });
    expect(outcome).toBeInstanceOf(OrqError);
    expect((outcome as OrqError).code).toBe('BUDGET_EXHAUSTED');
    expect(turns).toBe(1);
    expect(usage.total.inputTokens + usage.total.outputTokens).toBe(1_800);
    expect(usage.reserved.tokens).toBe(0);
  });

  it('is sent when it fits, and the call is counted once with every turn', async () => {
    const { outcome, turns, usage } = await callWithRepair(10_000, {
      inputTokens: 1_000,
      outputTokens: 800,
    });
    expect(outcome).toBeUndefined();
    expect(turns).toBe(2);
    expect(usage.total).toMatchObject({ calls: 1, inputTokens: 2_000, outputTokens: 1_600 });
    expect(usage.reserved.tokens).toBe(0);
  });

  it('waits, rather than ends the session, when only another call in flight is in the way', async () => {
    // 2,000 held by another call: 2,000 + 2,000 + 3,500 > 6,000, but 2,000 + 3,500 fits.
    const { outcome, turns, usage } = await callWithRepair(
      6_000,
      { inputTokens: 1_000, outputTokens: 800 },
      2_000,
    );
    expect(outcome).toBeInstanceOf(BudgetWaitError);
    expect(turns).toBe(1);
    expect(usage.reserved.tokens).toBe(0);
  });
});
