import { describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/shared/config/load.js';
import { BudgetConfig, SessionConfig } from '../../src/shared/config/schema.js';
import {
  budgetLimits,
  priceOf,
  reservationFor,
  reservationLeaseMs,
  roleModel,
  unpricedModels,
  usdMicros,
} from '../../src/shared/budget.js';
import { usageFromHash } from '../../src/shared/store/usage-store.js';

const budget = (input: unknown = {}) => BudgetConfig.parse(input);

describe('price to USD', () => {
  it('counts tokens times USD per million tokens as micro-dollars', () => {
    const price = { inputPerMTok: 3, outputPerMTok: 15 };
    // 1000 × $3/M + 200 × $15/M = $0.003 + $0.003 = 6000 µ$
    expect(usdMicros({ inputTokens: 1000, outputTokens: 200 }, price)).toBe(6000);
  });

  it('rounds a fractional micro-dollar up, never down', () => {
    const price = { inputPerMTok: 0.15, outputPerMTok: 0.6 };
    // 7 × 0.15 + 3 × 0.6 = 2.85 µ$ → 3
    expect(usdMicros({ inputTokens: 7, outputTokens: 3 }, price)).toBe(3);
  });

  it('does not round float noise up (100 × 0.07 is 7, not 8)', () => {
    expect(
      usdMicros({ inputTokens: 100, outputTokens: 0 }, { inputPerMTok: 0.07, outputPerMTok: 0 }),
    ).toBe(7);
  });

  it('prices a model by its name, and the builtin provider as free unless listed', () => {
    const b = budget({ prices: { 'gpt-4o-mini': { inputPerMTok: 0.15, outputPerMTok: 0.6 } } });
    expect(priceOf(b, 'openai', 'gpt-4o-mini')).toEqual({ inputPerMTok: 0.15, outputPerMTok: 0.6 });
    expect(priceOf(b, 'openai', 'gpt-4o')).toBeUndefined();
    expect(priceOf(b, 'builtin', 'builtin')).toEqual({ inputPerMTok: 0, outputPerMTok: 0 });
    const priced = budget({ prices: { builtin: { inputPerMTok: 1, outputPerMTok: 2 } } });
    expect(priceOf(priced, 'builtin', 'builtin')).toEqual({ inputPerMTok: 1, outputPerMTok: 2 });
  });
});

describe('budget limits and reservations', () => {
  it('has no limits when neither maxTokens nor maxUsd is set', () => {
    expect(budgetLimits(budget())).toBeUndefined();
  });

  it('converts maxUsd to micro-dollars', () => {
    expect(budgetLimits(budget({ maxTokens: 5000, maxUsd: 0.25 }))).toEqual({
      maxTokens: 5000,
      maxUsdMicros: 250_000,
    });
  });

  it('reserves reserveTokensPerCall tokens, priced at the dearer of the two rates', () => {
    const b = budget({ reserveTokensPerCall: 2000 });
    expect(reservationFor(b, { inputPerMTok: 3, outputPerMTok: 15 })).toEqual({
      tokens: 2000,
      usdMicros: 30_000,
    });
    expect(reservationFor(b, undefined)).toEqual({ tokens: 2000, usdMicros: 0 });
  });

  it('reserves a known call as its input plus its output limit, each side at its own rate', () => {
    const b = budget({ reserveTokensPerCall: 2000 });
    const price = { inputPerMTok: 3, outputPerMTok: 15 };
    expect(reservationFor(b, price, { inputTokens: 1000, maxOutputTokens: 500 })).toEqual({
      tokens: 1500,
      usdMicros: 3000 + 7500,
    });
    // No output limit sent: reserveTokensPerCall stands for the output.
    expect(reservationFor(b, price, { inputTokens: 1000, maxOutputTokens: undefined })).toEqual({
      tokens: 3000,
      usdMicros: 3000 + 30_000,
    });
  });

  it('defaults to 4000 tokens per call, no limit, no prices and 10,000 tasks', () => {
    const config = parseConfig({});
    expect(config.budget).toEqual({ reserveTokensPerCall: 4000, prices: {}, maxTasks: 10_000 });
    expect(config.llm.judgeSamples).toMatchObject({ mode: 'fixed', k: 1, aggregate: 'median' });
  });

  it('names a misspelt budget key', () => {
    expect(() => parseConfig({ budget: { maxToken: 10 } })).toThrow(/budget\.maxToken/);
  });

  it('lists the role models a maxUsd budget has no price for', () => {
    const config = SessionConfig.parse({
      llm: {
        default: { provider: 'openai', model: 'gpt-4o-mini' },
        judge: { model: 'gpt-4o' },
        worker: { provider: 'builtin', model: 'builtin' },
      },
      budget: { maxUsd: 1, prices: { 'gpt-4o-mini': { inputPerMTok: 0.15, outputPerMTok: 0.6 } } },
    });
    expect(roleModel(config.llm, 'judge')).toEqual({ provider: 'openai', model: 'gpt-4o' });
    expect(unpricedModels(config)).toEqual(['gpt-4o']);
  });
});

describe('usage hash', () => {
  it('reads totals, roles, tasks, reservations and the exhaustion mark', () => {
    const usage = usageFromHash({
      in: '120',
      out: '30',
      usd_micros: '2500',
      calls: '3',
      'planner:in': '100',
      'planner:out': '20',
      'planner:calls': '1',
      'worker:in': '20',
      'worker:out': '10',
      'worker:usd_micros': '2500',
      'worker:calls': '2',
      'task:t1.a:in': '20',
      'task:t1.a:out': '10',
      'task:t1.a:calls': '2',
      reserved_tokens: '4000',
      grants: '4',
      denied: '2',
      exhausted: 'tokens',
      exhausted_grants: '4',
    });
    expect(usage.total).toEqual({ inputTokens: 120, outputTokens: 30, usd: 0.0025, calls: 3 });
    expect(usage.byRole.planner).toEqual({ inputTokens: 100, outputTokens: 20, usd: 0, calls: 1 });
    expect(usage.byRole.worker?.usd).toBe(0.0025);
    expect(usage.byTask['t1.a']).toEqual({ inputTokens: 20, outputTokens: 10, usd: 0, calls: 2 });
    expect(usage.reserved).toEqual({ tokens: 4000, usd: 0 });
    expect(usage.exhausted).toEqual({ limit: 'tokens', afterGrants: 4 });
    expect(usage.denied).toBe(2);
  });

  it('is all zeros for a session that made no call', () => {
    const usage = usageFromHash({});
    expect(usage.total.calls).toBe(0);
    expect(usage.byRole).toEqual({});
    expect(usage.exhausted).toBeUndefined();
  });
});

describe('reservationLeaseMs', () => {
  it("outlasts the role's longest call: its time limit for every repair turn, and a minute", () => {
    const config = SessionConfig.parse({
      llm: {
        default: { timeoutSeconds: 120 },
        worker: { timeoutSeconds: 600 },
        maxRepairAttempts: 2,
      },
    });
    expect(reservationLeaseMs(config, 'worker')).toBe(600_000 * 3 + 60_000);
    expect(reservationLeaseMs(config, 'judge')).toBe(120_000 * 3 + 60_000);
  });

  it("takes the replanner's limit from replanning.timeoutSeconds, as its calls do", () => {
    const seedLimit = SessionConfig.parse({
      llm: { default: { timeoutSeconds: 120 }, maxRepairAttempts: 1 },
      replanning: { timeoutSeconds: 900 },
    });
    expect(reservationLeaseMs(seedLimit, 'replanner')).toBe(900_000 * 2 + 60_000);
    // llm.replanner.timeoutSeconds counts when it is the lower of the two.
    const ownLimit = SessionConfig.parse({
      llm: { replanner: { timeoutSeconds: 60 }, maxRepairAttempts: 1 },
      replanning: { timeoutSeconds: 900 },
    });
    expect(reservationLeaseMs(ownLimit, 'replanner')).toBe(60_000 * 2 + 60_000);
  });
});
