import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { createClient, openClient } from '../../src/producers/client.js';
import { startTestRedis } from '../support/test-redis.js';

/** A server that answers but refuses orq's credentials is not "unreachable": say what is wrong. */
describe('credentials Redis refuses', () => {
  const url = new URL(inject('redisUrl'));
  const user = `orq-${randomUUID().slice(0, 8)}`;
  const admin = new Redis(url.toString());

  beforeAll(async () => {
    await admin.call('ACL', 'SETUSER', user, 'on', '>right-password', '~*', '&*', '+@all');
  });
  afterAll(async () => {
    await admin.call('ACL', 'DELUSER', user);
    admin.disconnect();
  });

  it("a wrong password is CONFIG_INVALID, naming the server and createClient's connection option", async () => {
    const wrong = new URL(url);
    wrong.username = user;
    wrong.password = 'wrong-password';
    const error = await createClient({ connection: wrong.toString() }).catch((e: unknown) => e);
    expect(error).toMatchObject({
      code: 'CONFIG_INVALID',
      message: expect.stringMatching(
        /^Redis at .+ refused orq's user name or password \(WRONGPASS .+\)\. Check the user name and password in the `connection` option/,
      ),
    });
    expect(String((error as Error).message)).not.toContain('wrong-password');
    // The CLI reads REDIS_URL, and says so.
    await expect(openClient({ connection: wrong.toString() }, 'REDIS_URL')).rejects.toMatchObject({
      hint: expect.stringContaining('Check the user name and password in REDIS_URL') as string,
    });

    const right = new URL(wrong);
    right.password = 'right-password';
    const client = await createClient({ connection: right.toString() });
    await client.close();
  });

  it('a missing password is CONFIG_INVALID saying the server requires one', async () => {
    // A server of its own: a password on the shared one would lock every other test out.
    const dir = mkdtempSync(join(tmpdir(), 'orq-redis-auth-'));
    const server = await startTestRedis({ dir });
    const port = server.port;
    const setup = new Redis(server.url);
    try {
      await setup.config('SET', 'requirepass', 'needed');
      await expect(createClient({ connection: `redis://127.0.0.1:${port}` })).rejects.toMatchObject(
        {
          code: 'CONFIG_INVALID',
          message: expect.stringMatching(
            /requires a password \(NOAUTH Authentication required\)\. Give it in the `connection` option: redis:\/\/:PASSWORD@host:port/,
          ),
        },
      );
    } finally {
      setup.disconnect();
      await server.stop();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
