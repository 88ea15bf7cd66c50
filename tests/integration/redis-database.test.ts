import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { describe, expect, inject, it } from 'vitest';
import { createClient } from '../../src/producers/client.js';
import { parseConfig } from '../../src/shared/config/load.js';
import { silentLogger } from '../../src/shared/logger.js';
import { sessionKeys } from '../../src/shared/store/keys.js';
import { startRoles } from '../../src/workers/registry.js';

const base = inject('redisUrl').replace(/\/\d*$/, '');

describe('the database a REDIS_URL names', () => {
  it('is refused, naming it, when the server does not have it: no silent fallback to 0', async () => {
    const url = `${base}/99`;
    await expect(createClient({ connection: url })).rejects.toMatchObject({
      code: 'CONFIG_INVALID',
      message: expect.stringContaining('has no database 99'),
    });
    const config = parseConfig({ redis: { prefix: `db${randomUUID().slice(0, 8)}` } });
    await expect(
      startRoles({ roles: ['coordinator'], connection: url, config, logger: silentLogger }),
    ).rejects.toMatchObject({ code: 'CONFIG_INVALID' });
  });

  it('is where the sessions go when the server has it', async () => {
    const prefix = `db${randomUUID().slice(0, 8)}`;
    const client = await createClient({ connection: `${base}/3`, prefix });
    const [db0, db3] = [new Redis(`${base}/0`), new Redis(`${base}/3`)];
    try {
      const { id } = await client.submit({ instruction: 'kept in database 3' });
      const meta = sessionKeys(prefix, id).meta;
      expect(await db3.exists(meta)).toBe(1);
      expect(await db0.exists(meta)).toBe(0);
    } finally {
      await client.close();
      db0.disconnect();
      db3.disconnect();
    }
  });
});

describe('a connection URL that is not a Redis address', () => {
  it('is refused at once, as the config refuses it, not after the connect timeout', async () => {
    for (const connection of ['http://127.0.0.1:6380', 'redis://127.0.0.1:6380/not-a-number']) {
      await expect(createClient({ connection })).rejects.toMatchObject({
        code: 'VALIDATION_FAILED',
        message: expect.stringContaining(
          'connection: expected a redis:// or rediss:// URL',
        ) as string,
      });
    }
  });
});

describe('a missing connection', () => {
  // `process.env.REDIS_URL!` with the variable unset: ioredis would connect to 127.0.0.1:6379.
  it('is refused at once by createClient and startRoles, naming the option', async () => {
    const config = parseConfig({ redis: { prefix: `nc${randomUUID().slice(0, 8)}` } });
    for (const connection of [undefined, null, 6379]) {
      const refusal = {
        code: 'VALIDATION_FAILED',
        message: expect.stringContaining('connection: expected a Redis URL') as string,
      };
      await expect(
        createClient({ connection: connection as unknown as string }),
      ).rejects.toMatchObject(refusal);
      await expect(
        startRoles({
          roles: ['coordinator'],
          connection: connection as unknown as string,
          config,
          logger: silentLogger,
        }),
      ).rejects.toMatchObject(refusal);
    }
  });
});

describe('rediss:// to a Redis without TLS', () => {
  it('is refused with a hint about TLS, and ioredis prints nothing', async () => {
    const errors: unknown[][] = [];
    const original = console.error;
    console.error = (...args: unknown[]) => void errors.push(args);
    try {
      // The server waits on the TLS handshake as on a command: the connect timeout decides.
      await expect(
        createClient({ connection: inject('redisUrl').replace(/^redis:/, 'rediss:') }),
      ).rejects.toMatchObject({
        code: 'REDIS_UNAVAILABLE',
        hint: expect.stringContaining('if the server has no TLS, use redis://') as string,
      });
      // The socket ends after the client gave up: no "Unhandled error event" printed for it.
      await new Promise((resolve) => setTimeout(resolve, 1_000));
      expect(errors).toEqual([]);
    } finally {
      console.error = original;
    }
  });
});
