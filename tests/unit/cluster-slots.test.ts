import { createRequire } from 'node:module';
import { describe, expect, it } from 'vitest';
import { ALL_QUEUES, bullPrefix } from '../../src/shared/queues.js';
import { sessionKeyList, sessionKeys } from '../../src/shared/store/keys.js';

const require = createRequire(import.meta.url);
/** The slot Redis Cluster computes for a key (CRC16 of its hash tag), as ioredis does. */
const slotOf = require('cluster-key-slot') as (key: string) => number;

describe('keys on Redis Cluster', () => {
  it('puts every key one atomic session transition touches in a single slot', () => {
    for (const sessionId of ['3a5d5fe5-ab9c-4b54-bb93-a32f119ad312', 'x', 'crashed-producer']) {
      const keys = sessionKeys('orq', sessionId);
      const all = [...sessionKeyList(keys), ...Object.values(keys)];
      expect(new Set(all.map(slotOf)).size, sessionId).toBe(1);
    }
  });

  it('spreads different sessions over different slots', () => {
    const slots = new Set(
      Array.from({ length: 50 }, (_, i) => slotOf(sessionKeys('orq', `s${i}`).meta)),
    );
    expect(slots.size).toBeGreaterThan(40);
  });

  it('keeps all of BullMQ keys of every orq queue in the slot of the {prefix} tag', () => {
    const prefix = bullPrefix('orq');
    const slots = ALL_QUEUES.flatMap((q) =>
      ['wait', 'active', 'events', 'meta', 'id', '123'].map((suffix) =>
        slotOf(`${prefix}:${q}:${suffix}`),
      ),
    );
    expect(new Set(slots).size).toBe(1);
  });
});
