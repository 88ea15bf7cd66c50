import { describe, expect, it } from 'vitest';
import { weightedScore, type TokenLogprob } from '../../src/workers/llm/score-logprobs.js';

const certain = (token: string): TokenLogprob => ({ token, logprob: 0, top: [] });
const scoreToken = (token: string, alternatives: Record<string, number>): TokenLogprob => ({
  token,
  logprob: Math.log(alternatives[token.trim()] ?? 1),
  top: Object.entries(alternatives).map(([t, p]) => ({ token: t, logprob: Math.log(p) })),
});

describe('weightedScore', () => {
  it('is the expected value over the alternatives of the score token', () => {
    const tokens = [
      certain('{"'),
      certain('score'),
      certain('":'),
      scoreToken(' 70', { ' 70': 0.5, ' 60': 0.3, ' 80': 0.2 }),
      certain(', "isAcceptable": true}'),
    ];
    expect(weightedScore(tokens)).toEqual({ score: 69, stated: 70, mass: 1 });
  });

  it('weighs only the alternatives that are scores, normalised by their mass', () => {
    const tokens = [
      certain('{"score": '),
      scoreToken('90', { '90': 0.5, '100': 0.25, abc: 0.1, '101': 0.15 }),
      certain('}'),
    ];
    const weighted = weightedScore(tokens);
    expect(weighted?.score).toBeCloseTo((0.5 * 90 + 0.25 * 100) / 0.75, 2);
    expect(weighted?.mass).toBeCloseTo(0.75, 5);
  });

  it('gives up where the number spans tokens or there is no score field', () => {
    const split = [certain('{"score": '), scoreToken('7', { '7': 0.9, '8': 0.1 }), certain('2}')];
    expect(weightedScore(split)).toBeUndefined();
    expect(weightedScore([certain('{"rating": 70}')])).toBeUndefined();
    expect(weightedScore([])).toBeUndefined();
  });
});
