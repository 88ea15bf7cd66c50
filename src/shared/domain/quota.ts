import { z } from 'zod';

/**
 * One provider limit as `orq status`, GET /quotas and /metrics show it (issue 33): what it
 * allows (the rateLimit its calls were last made with), what is left of it now, and what it
 * has seen since it was first used.
 */
/** One tenant's calls in a limit's fair line (issue 46). */
export const QuotaLineTenant = z.object({
  tenant: z.string(),
  /** Its calls waiting for the limit now. */
  waiting: z.number().int(),
  /** How long the oldest of them has waited (ms). */
  oldestWaitMs: z.number().int(),
  /** Per session: its calls waiting, and the place of its first in the whole line (1 = next). */
  sessions: z.array(
    z.object({ sessionId: z.string(), waiting: z.number().int(), place: z.number().int() }),
  ),
});
export type QuotaLineTenant = z.infer<typeof QuotaLineTenant>;

export const QuotaView = z.object({
  /** The limit's id: a hash of provider kind, base URL and API key hash. */
  id: z.string(),
  /** `openai api.openai.com/v1 key 3f2a9c1b`: the key only as a hash. */
  name: z.string(),
  requestsPerMinute: z.number().optional(),
  tokensPerMinute: z.number().optional(),
  maxConcurrent: z.number().int().optional(),
  /** Requests of the bucket that may start now (of requestsPerMinute × burstSeconds / 60). */
  requestsLeft: z.number().int().optional(),
  /** Tokens of the bucket left now; below 0 while calls that used more than they reserved are paid off. */
  tokensLeft: z.number().int().optional(),
  /** The burst the buckets hold, in seconds of the per-minute rates. */
  burstSeconds: z.number().optional(),
  /** Calls holding a slot now. */
  inFlight: z.number().int(),
  /** How long every pod still waits after a 429 (0 when not paused). */
  pausedForMs: z.number().int(),
  /** Calls that were granted the quota. */
  granted: z.number().int(),
  /** Times a call found the quota short or paused (and waited, or handed its job back). */
  refused: z.number().int(),
  /** Answers 429 from the provider. */
  throttled: z.number().int(),
  /** Tokens the provider reported for the calls settled. */
  usedTokens: z.number().int(),
  /** Calls waiting in the limit's fair line now (docs/quotas.md#the-line). */
  waiting: z.number().int(),
  /** The line by tenant, in the order of each tenant's first call. */
  line: z.array(QuotaLineTenant),
});
export type QuotaView = z.infer<typeof QuotaView>;
