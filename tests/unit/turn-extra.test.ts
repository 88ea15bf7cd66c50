import { describe, expect, it } from 'vitest';
import { turnExtra } from '../../src/shared/budget.js';

describe('turnExtra', () => {
  const price = { inputPerMTok: 1, outputPerMTok: 5 };

  it('asks for what the turns so far and the next one need beyond what the call holds', () => {
    const held = [{ tokens: 2_000, usdMicros: 6_000 }];
    const spent = { inputTokens: 1_000, outputTokens: 800 };
    const turn = { tokens: 3_500, usdMicros: 7_500 };
    // 1,800 spent + 3,500 next - 2,000 held; USD: 5,000 spent + 7,500 - 6,000.
    expect(turnExtra(held, spent, turn, price)).toEqual({ tokens: 3_300, usdMicros: 6_500 });
  });

  it('asks for nothing while what the call holds covers it', () => {
    const held = [
      { tokens: 5_000, usdMicros: 20_000 },
      { tokens: 1_000, usdMicros: 1_000 },
    ];
    expect(
      turnExtra(
        held,
        { inputTokens: 100, outputTokens: 50 },
        { tokens: 900, usdMicros: 900 },
        price,
      ),
    ).toEqual({ tokens: 0, usdMicros: 0 });
  });

  it('counts no USD without a price', () => {
    const extra = turnExtra(
      [],
      { inputTokens: 10, outputTokens: 10 },
      { tokens: 5, usdMicros: 0 },
      undefined,
    );
    expect(extra).toEqual({ tokens: 25, usdMicros: 0 });
  });
});
