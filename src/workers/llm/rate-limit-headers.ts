/**
 * How long a provider that answered 429 asks to be left alone, from its headers (pure: the
 * headers and the time in, milliseconds out). Read in this order, the first that parses wins:
 *   retry-after-ms                      OpenAI (milliseconds)
 *   retry-after                         RFC 9110: seconds, or an HTTP date
 *   x-ratelimit-reset-requests/-tokens  OpenAI: a duration such as `1s`, `6m0s`, `250ms`
 *   anthropic-ratelimit-*-reset         Anthropic: an RFC 3339 time
 * Of the resets, those whose `remaining` is 0 count (the quota that is spent); when none says
 * so, the latest. A 429 with none of these pauses for DEFAULT_PAUSE_MS.
 */

/** The pause after a 429 that says nothing of when to come back. */
export const DEFAULT_PAUSE_MS = 1_000;
/** A provider's reset further off than this is read as a mistake, not obeyed for hours. */
export const MAX_PAUSE_MS = 10 * 60_000;

/** What fetch's Headers and a plain object of lower-case names both offer. */
export interface HeaderSource {
  get(name: string): string | null;
}

const UNITS_MS: Record<string, number> = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000 };

/** OpenAI's reset durations: `1s`, `6m0s`, `1m30.5s`, `250ms`, `2h3m`. */
export function parseResetDuration(text: string): number | undefined {
  const trimmed = text.trim();
  if (!/^(\d+(\.\d+)?(ms|h|m|s))+$/.test(trimmed)) return undefined;
  let total = 0;
  for (const [, amount, unit] of trimmed.matchAll(/(\d+(?:\.\d+)?)(ms|h|m|s)/g)) {
    total += Number(amount) * (UNITS_MS[unit as string] ?? 0);
  }
  return total;
}

/** Retry-After: delay-seconds or an HTTP date. */
function retryAfterMs(text: string, nowMs: number): number | undefined {
  const trimmed = text.trim();
  if (/^\d+(\.\d+)?$/.test(trimmed)) return Number(trimmed) * 1000;
  const at = Date.parse(trimmed);
  return Number.isNaN(at) ? undefined : at - nowMs;
}

const OPENAI_RESETS = ['requests', 'tokens'] as const;
const ANTHROPIC_RESETS = ['requests', 'tokens', 'input-tokens', 'output-tokens'] as const;

/** The resets a provider gave, each with whether its quota is spent (remaining 0). */
function providerResets(headers: HeaderSource, nowMs: number): { ms: number; spent: boolean }[] {
  const resets: { ms: number; spent: boolean }[] = [];
  for (const kind of OPENAI_RESETS) {
    const raw = headers.get(`x-ratelimit-reset-${kind}`);
    const ms = raw === null ? undefined : parseResetDuration(raw);
    if (ms !== undefined) {
      resets.push({ ms, spent: headers.get(`x-ratelimit-remaining-${kind}`)?.trim() === '0' });
    }
  }
  for (const kind of ANTHROPIC_RESETS) {
    const raw = headers.get(`anthropic-ratelimit-${kind}-reset`);
    const at = raw === null ? Number.NaN : Date.parse(raw);
    if (!Number.isNaN(at)) {
      resets.push({
        ms: at - nowMs,
        spent: headers.get(`anthropic-ratelimit-${kind}-remaining`)?.trim() === '0',
      });
    }
  }
  return resets;
}

/** How long to pause every caller of the limit after a 429 with these headers, in ms. */
export function rateLimitPauseMs(headers: HeaderSource, nowMs: number = Date.now()): number {
  const clamp = (ms: number) => Math.min(MAX_PAUSE_MS, Math.max(0, Math.ceil(ms)));
  const ms = headers.get('retry-after-ms')?.trim();
  if (ms && /^\d+(\.\d+)?$/.test(ms)) return clamp(Number(ms));
  const after = headers.get('retry-after');
  const parsed = after === null ? undefined : retryAfterMs(after, nowMs);
  if (parsed !== undefined) return clamp(parsed);
  const resets = providerResets(headers, nowMs);
  const spent = resets.filter((r) => r.spent);
  const counted = spent.length > 0 ? spent : resets;
  if (counted.length === 0) return DEFAULT_PAUSE_MS;
  return clamp(Math.max(...counted.map((r) => r.ms)));
}
