import { describe, expect, it } from 'vitest';
import { noContainerEngine } from '../support/containers.js';
import { chooseRedisServers, TestRedisUnavailable } from '../support/test-redis.js';

// How a test run gets its Redis servers (docs/development.md#how-the-tests-get-their-redis):
// every way out of chooseRedisServers says why, and a forced way that cannot be had fails.
const MISSING_IMAGE = 'orq-test-no-such-image:0';

describe('chooseRedisServers', () => {
  it('refuses a way it does not know, and takes the binary when asked', async () => {
    await expect(chooseRedisServers({ ORQ_TEST_REDIS_SERVERS: 'podman' })).rejects.toThrow(
      /ORQ_TEST_REDIS_SERVERS=podman: say container or binary/,
    );
    await expect(chooseRedisServers({ ORQ_TEST_REDIS_SERVERS: 'binary' })).resolves.toMatchObject({
      way: 'binary',
      why: 'ORQ_TEST_REDIS_SERVERS=binary',
    });
  });

  it('falls back to the binary, saying why, when the engine cannot get the image', async () => {
    const noEngine = await noContainerEngine();
    const servers = await chooseRedisServers({ ORQ_TEST_REDIS_IMAGE: MISSING_IMAGE });
    expect(servers.way).toBe('binary');
    if (servers.way !== 'binary') return;
    expect(servers.why).toContain(
      noEngine === undefined ? `cannot get the image ${MISSING_IMAGE}` : 'no container engine',
    );
  });

  it('fails with what to do when containers are asked for and cannot be had', async () => {
    const noEngine = await noContainerEngine();
    const chosen = chooseRedisServers({
      ORQ_TEST_REDIS_SERVERS: 'container',
      ORQ_TEST_REDIS_IMAGE: MISSING_IMAGE,
    });
    await expect(chosen).rejects.toThrow(TestRedisUnavailable);
    await expect(chosen).rejects.toThrow(
      noEngine === undefined
        ? /scripts\/test-images\.sh builds a local one/
        : /no container engine answers/,
    );
  });
});
