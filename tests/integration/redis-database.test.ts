import { randomUUID } from 'node:crypto';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { describe, expect, inject, it } from 'vitest';
import { createClient, openClient } from '../../src/producers/client.js';
import type { OrqError } from '../../src/shared/errors.js';
import { parseConfig } from '../../src/shared/config/load.js';
import { createLogger, silentLogger } from '../../src/shared/logger.js';
import { freePort } from '../../src/shared/redis-server.js';
import { sessionIndexKey, sessionKeys } from '../../src/shared/store/keys.js';
import { launchRoles, startRoles } from '../../src/workers/registry.js';

const base = inject('redisUrl').replace(/\/\d*$/, '');

describe('the database a REDIS_URL names', () => {
  it('is refused, naming it, when the server does not have it: no silent fallback to 0', async () => {
    const url = `${base}/99`;
    // A library caller set the `connection` option: the hint names it, not REDIS_URL.
    const refusal = {
      code: 'CONFIG_INVALID',
      message: expect.stringContaining('has no database 99') as string,
      hint: expect.stringContaining('in the `connection` option') as string,
    };
    const clientError = await createClient({ connection: url }).catch((e: unknown) => e);
    expect(clientError).toMatchObject(refusal);
    expect((clientError as OrqError).hint).not.toContain('REDIS_URL');
    const config = parseConfig({ redis: { prefix: `db${randomUUID().slice(0, 8)}` } });
    const options = {
      roles: ['coordinator' as const],
      connection: url,
      config,
      logger: silentLogger,
    };
    const rolesError = await startRoles(options).catch((e: unknown) => e);
    expect(rolesError).toMatchObject(refusal);
    expect((rolesError as OrqError).hint).not.toContain('REDIS_URL');
    // The CLI's user set REDIS_URL.
    const cli = { code: 'CONFIG_INVALID', hint: expect.stringContaining('in REDIS_URL') as string };
    await expect(openClient({ connection: url }, 'REDIS_URL')).rejects.toMatchObject(cli);
    await expect(launchRoles(options, 'REDIS_URL')).rejects.toMatchObject(cli);
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

describe('options createClient and startRoles do not have', () => {
  it('are refused, naming the key, rather than ignored (prefx left the client on prefix orq)', async () => {
    const connection = inject('redisUrl');
    await expect(createClient({ connection, prefx: 'walk' } as never)).rejects.toMatchObject({
      code: 'VALIDATION_FAILED',
      message: 'Invalid client options: unknown key "prefx" at the top level',
    });
    const config = parseConfig({ redis: { prefix: `uk${randomUUID().slice(0, 8)}` } });
    await expect(
      startRoles({
        roles: ['coordinator'],
        connection,
        config,
        logger: silentLogger,
        concurency: 2,
      } as never),
    ).rejects.toMatchObject({
      code: 'VALIDATION_FAILED',
      message: 'Invalid startRoles options: unknown key "concurency" at the top level',
    });
  });

  it('leaves every option they have accepted: ioredis options, a prefix, a config, a pino logger', async () => {
    const url = new URL(inject('redisUrl'));
    const prefix = `ok${randomUUID().slice(0, 8)}`;
    const client = await createClient({
      connection: { host: url.hostname, port: Number(url.port) },
      prefix,
      config: { queues: { historyMaxLength: 500 } },
      logger: createLogger({ level: 'silent' }),
    });
    try {
      expect((await client.submit({ instruction: 'under its prefix' })).state).toBe('PLANNING');
      expect(await client.store.redis.exists(sessionIndexKey(prefix))).toBe(1);
    } finally {
      await client.close();
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

describe('an address no Redis answers at', () => {
  it('a socket path with no socket file is refused at once, naming the path, not localhost:6379', async () => {
    const path = join(tmpdir(), `orq-no-such-${randomUUID().slice(0, 8)}.sock`);
    // The path as a string (ioredis reads one starting with / as a socket) and as ioredis options.
    for (const connection of [path, { path }]) {
      const started = Date.now();
      await expect(createClient({ connection }), JSON.stringify(connection)).rejects.toMatchObject({
        code: 'REDIS_UNAVAILABLE',
        message: expect.stringContaining(
          `Redis at ${path} is unreachable (ENOENT: no such socket file)`,
        ) as string,
        details: { address: path },
      });
      // It waited out the 5 s connect timeout before, the ENOENT being known at once.
      expect(Date.now() - started).toBeLessThan(2_000);
    }
  });

  it("names createClient's connection option in its hint, not REDIS_URL, which it does not read", async () => {
    const port = await freePort();
    const error = await createClient({ connection: { host: '127.0.0.1', port } }).catch(
      (e: unknown) => e,
    );
    expect(error).toMatchObject({
      code: 'REDIS_UNAVAILABLE',
      message: expect.stringContaining(`Redis at 127.0.0.1:${port} is unreachable`) as string,
      hint: expect.stringContaining('Check the `connection` option of createClient') as string,
    });
    expect((error as Error).message).not.toContain('REDIS_URL');
  });

  it('names REDIS_URL in the hint of the CLI, which reads it', async () => {
    const port = await freePort();
    await expect(
      openClient({ connection: `redis://127.0.0.1:${port}` }, 'REDIS_URL'),
    ).rejects.toMatchObject({
      code: 'REDIS_UNAVAILABLE',
      hint: 'Start Redis or set REDIS_URL to a reachable server.',
    });
  });
});
