import { createHash } from 'node:crypto';
import { configure } from 'safe-stable-stringify';

const stableJson = configure({ deterministic: true });

/**
 * What a submit asked for besides its instruction (its config overrides and metadata), as one
 * digest kept with a session submitted under an idempotency key: a later submit with that key
 * and another digest is a different request, not a retry, and is refused.
 */
export function submitDigest(request: { config?: unknown; metadata?: unknown }): string {
  const canonical = String(
    stableJson({ config: request.config ?? {}, metadata: request.metadata ?? {} }),
  );
  return createHash('sha256').update(canonical).digest('hex');
}
