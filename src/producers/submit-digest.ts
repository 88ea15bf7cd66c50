import { createHash } from 'node:crypto';
import { configure } from 'safe-stable-stringify';

const stableJson = configure({ deterministic: true });

/**
 * What a submit asked for besides its instruction (config overrides, metadata, tenant and
 * priority), as one
 * digest kept with a session submitted under an idempotency key: a later submit with that key
 * and another digest is a different request, not a retry, and is refused.
 */
export function submitDigest(request: {
  config?: unknown;
  metadata?: unknown;
  tenant?: string | undefined;
  priority?: number | undefined;
}): string {
  // Tenant and priority count only when given: a retry of a submit made before they existed
  // keeps the digest it was stored with.
  const canonical = String(
    stableJson({
      config: request.config ?? {},
      metadata: request.metadata ?? {},
      ...(request.tenant !== undefined ? { tenant: request.tenant } : {}),
      ...(request.priority !== undefined ? { priority: request.priority } : {}),
    }),
  );
  return createHash('sha256').update(canonical).digest('hex');
}
