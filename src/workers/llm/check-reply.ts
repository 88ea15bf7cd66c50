import type { z } from 'zod';
import { describeZodIssues, OrqError } from '../../shared/errors.js';

/**
 * Checks a model's reply against its schema before it leaves the role or executor that asked
 * for it. Off-schema output is LLM_OUTPUT_INVALID (retryable: a model may answer well the next
 * time), never a ValidationError, so the job's bounded retries apply and its last failure is
 * recorded in the session history (DESIGN.md: malformed LLM output gets a bounded retry, then a
 * clear failure). An off-schema reply that went on as a coordinator event would instead fail the
 * coordinator's own validation and leave the session waiting.
 */
export function checkReply<T extends z.ZodType>(
  schema: T,
  value: unknown,
  what: string,
  details: Record<string, unknown>,
): z.infer<T> {
  const result = schema.safeParse(value);
  if (result.success) return result.data;
  const issues = describeZodIssues(result.error);
  throw new OrqError(
    'LLM_OUTPUT_INVALID',
    `The model's ${what} does not match its schema: ${issues.map((i) => `${i.path}: ${i.message}`).join('; ')}`,
    { details: { ...details, issues } },
  );
}
