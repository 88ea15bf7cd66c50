import { z } from 'zod';
import { describe, expect, it } from 'vitest';
import {
  DEFAULT_PAUSE_MS,
  MAX_PAUSE_MS,
  parseResetDuration,
  rateLimitPauseMs,
} from '../../src/workers/llm/rate-limit-headers.js';
import { DEFAULT_ANTHROPIC_MAX_TOKENS } from '../../src/shared/config/roles.js';
import { estimateTokens, providerLimit } from '../../src/workers/llm/quota.js';
import { estimateInputTokens } from '../../src/workers/llm/token-estimate.js';
import { quotaKeys } from '../../src/shared/store/quota-store.js';
import { slotOf } from '../support/redis-cluster.js';
import { formatQuotas } from '../../src/producers/cli/format.js';

const headers = (values: Record<string, string>) => new Headers(values);
const NOW = Date.parse('2026-11-27T02:00:00Z');

describe('the pause a 429 asks for', () => {
  it('reads retry-after-ms first, then Retry-After in seconds or as a date', () => {
    expect(rateLimitPauseMs(headers({ 'retry-after-ms': '1500', 'retry-after': '9' }), NOW)).toBe(
      1500,
    );
    expect(rateLimitPauseMs(headers({ 'retry-after': '7' }), NOW)).toBe(7000);
    expect(rateLimitPauseMs(headers({ 'retry-after': '0.5' }), NOW)).toBe(500);
    const date = new Date(NOW + 30_000).toUTCString();
    expect(rateLimitPauseMs(headers({ 'retry-after': date }), NOW)).toBe(30_000);
  });

  it("reads OpenAI's reset durations, the spent quota's when one says remaining 0", () => {
    expect(parseResetDuration('6m0s')).toBe(360_000);
    expect(parseResetDuration('1m30.5s')).toBe(90_500);
    expect(parseResetDuration('250ms')).toBe(250);
    expect(parseResetDuration('soon')).toBeUndefined();
    const both = {
      'x-ratelimit-reset-requests': '2s',
      'x-ratelimit-reset-tokens': '40s',
    };
    expect(rateLimitPauseMs(headers({ ...both, 'x-ratelimit-remaining-requests': '0' }), NOW)).toBe(
      2000,
    );
    // None says which is spent: the later reset is the safe one.
    expect(rateLimitPauseMs(headers(both), NOW)).toBe(40_000);
  });

  it("reads Anthropic's reset times", () => {
    const at = (ms: number) => new Date(NOW + ms).toISOString();
    const anthropic = {
      'anthropic-ratelimit-requests-reset': at(3_000),
      'anthropic-ratelimit-tokens-reset': at(12_000),
      'anthropic-ratelimit-tokens-remaining': '0',
    };
    expect(rateLimitPauseMs(headers(anthropic), NOW)).toBe(12_000);
  });

  it('pauses a second without any header, and never for hours', () => {
    expect(rateLimitPauseMs(headers({}), NOW)).toBe(DEFAULT_PAUSE_MS);
    expect(rateLimitPauseMs(headers({ 'retry-after': '86400' }), NOW)).toBe(MAX_PAUSE_MS);
    expect(rateLimitPauseMs(headers({ 'retry-after': 'garbage' }), NOW)).toBe(DEFAULT_PAUSE_MS);
  });
});

describe('which limit a call spends', () => {
  it('is one per provider kind, base URL and key, whatever the role', () => {
    const a = providerLimit('openai', 'http://llm.local/v1/', 'sk-one');
    expect(providerLimit('openai', 'http://llm.local/v1', 'sk-one')).toEqual(a);
    expect(providerLimit('openai', 'http://llm.local/v1', 'sk-two').id).not.toBe(a.id);
    expect(providerLimit('anthropic', 'http://llm.local/v1', 'sk-one').id).not.toBe(a.id);
    expect(providerLimit('openai', 'http://other.local/v1', 'sk-one').id).not.toBe(a.id);
    expect(providerLimit('openai', undefined, 'sk-one').name).toMatch(
      /^openai api\.openai\.com\/v1 key [0-9a-f]{8}$/,
    );
  });

  it('never shows or stores the key, only a hash of it', () => {
    const key = 'sk-secret-4f9a';
    const limit = providerLimit('anthropic', undefined, key);
    expect(JSON.stringify(limit)).not.toContain(key);
    expect(JSON.stringify(quotaKeys('orq', limit.id))).not.toContain(key);
  });

  it("keeps a limit's keys in one Redis Cluster slot", () => {
    for (const key of ['a', 'b', 'c']) {
      const keys = quotaKeys('orq', providerLimit('openai', undefined, key).id);
      expect(slotOf(keys.state)).toBe(slotOf(keys.slots));
    }
  });
});

describe('the tokens a call reserves', () => {
  const schema = z.object({ answer: z.string() });
  const request = { system: 'You write parsers.', user: 'Write a parser for CSV.', schema };
  const native = { structuredOutput: 'native' as const };

  it('are what it sends, as the tokenizer counts it, and the output cap it sends', async () => {
    const sent = await estimateInputTokens(request, native);
    expect(
      await estimateTokens(request, { ...native, provider: 'openai', maxOutputTokens: 500 }),
    ).toBe(sent + 500);
    // No cap sent to OpenAI: 1,024 reserved; Anthropic gets its default max_tokens then.
    expect(await estimateTokens(request, { ...native, provider: 'openai' })).toBe(sent + 1024);
    expect(await estimateTokens(request, { ...native, provider: 'anthropic' })).toBe(
      sent + DEFAULT_ANTHROPIC_MAX_TOKENS,
    );
    const repair = { ...request, followUp: { reply: 'not json', correction: 'answer in JSON' } };
    expect(
      await estimateTokens(repair, { ...native, provider: 'openai', maxOutputTokens: 500 }),
    ).toBeGreaterThan(sent + 500);
  });

  it('count Japanese as it is sent, not at four characters a token', async () => {
    const japanese = { ...request, user: 'CSV のパーサーを書いてください。'.repeat(50) };
    const config = { ...native, provider: 'openai' as const, maxOutputTokens: 1 };
    const input = (await estimateTokens(japanese, config)) - 1;
    expect(input).toBeGreaterThan(Math.ceil(japanese.user.length / 4) * 1.5);
  });
});

describe('orq status', () => {
  it('shows per limit what is left of its rates, the slots in flight, waits, 429s and a pause', () => {
    const text = formatQuotas([
      {
        id: 'x',
        name: 'openai api.openai.com/v1 key 3f2a9c1b',
        requestsPerMinute: 500,
        requestsLeft: 42,
        maxConcurrent: 8,
        burstSeconds: 10,
        inFlight: 3,
        pausedForMs: 12_400,
        granted: 1200,
        refused: 17,
        throttled: 2,
        usedTokens: 0,
        waiting: 0,
        line: [],
      },
    ]);
    const [title, header, row] = text.split('\n');
    expect(title).toBe('Provider quotas');
    expect(header?.split(/\s{2,}/)).toEqual([
      'LIMIT',
      'REQUESTS',
      'TOKENS',
      'IN FLIGHT',
      'CALLS',
      'WAITS',
      '429s',
      'PAUSED',
      'IN LINE',
    ]);
    expect(row?.split(/\s{2,}/)).toEqual([
      'openai api.openai.com/v1 key 3f2a9c1b',
      '42 left of 500/min',
      '-',
      '3/8',
      '1200',
      '17',
      '2',
      '12.4 s',
      '0',
    ]);
  });

  it("shows a limit's line by tenant, with each session's calls waiting and first place", () => {
    const text = formatQuotas([
      {
        id: 'x',
        name: 'openai api.openai.com/v1 key 3f2a9c1b',
        inFlight: 0,
        pausedForMs: 0,
        granted: 10,
        refused: 30,
        throttled: 0,
        usedTokens: 0,
        waiting: 3,
        line: [
          {
            tenant: 'acme',
            waiting: 2,
            oldestWaitMs: 4_200,
            sessions: [{ sessionId: 'big', waiting: 2, place: 2 }],
          },
          {
            tenant: 'beta',
            waiting: 1,
            oldestWaitMs: 300,
            sessions: [{ sessionId: 'small', waiting: 1, place: 1 }],
          },
        ],
      },
    ]);
    const lines = text.split('\n');
    expect(lines).toContain('In line for openai api.openai.com/v1 key 3f2a9c1b');
    const acme = lines.find((l) => l.startsWith('acme'));
    expect(acme?.split(/\s{2,}/)).toEqual(['acme', '2', '4.2 s', 'big 2 (place 2)']);
    expect(lines.find((l) => l.startsWith('beta'))).toContain('small 1 (place 1)');
  });
});
