import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { submitDigest } from '../../src/producers/submit-digest.js';

describe('submitDigest: what an idempotent retry must repeat', () => {
  const base = { config: { refinement: { noiseThreshold: 4 } }, metadata: { team: 'a' } };

  it('is the same as before tenants existed when no tenant or priority is given', () => {
    // The digest of a submit stored before issue 33: its config and metadata only.
    const before = createHash('sha256')
      .update('{"config":{"refinement":{"noiseThreshold":4}},"metadata":{"team":"a"}}')
      .digest('hex');
    expect(submitDigest(base)).toBe(before);
    expect(submitDigest({ ...base, tenant: undefined, priority: undefined })).toBe(before);
  });

  it.each([
    ['a tenant', { tenant: 'acme' }],
    ['another tenant', { tenant: 'other' }],
    ['a priority', { priority: 7 }],
  ])('changes with %s', (_name, extra) => {
    expect(submitDigest({ ...base, ...extra })).not.toBe(submitDigest(base));
  });

  it('does not depend on key order', () => {
    expect(submitDigest({ tenant: 'acme', priority: 7, ...base })).toBe(
      submitDigest({ ...base, priority: 7, tenant: 'acme' }),
    );
  });
});
