import { describe, expect, it } from 'vitest';
import { privateRedisNotice } from '../../src/producers/cli/commands/dashboard.js';
import { dataDir, type CliRedis } from '../../src/producers/cli/redis-for-cli.js';

const server = (owned: boolean, adopted?: boolean): CliRedis => ({
  url: 'redis://127.0.0.1:4242',
  connection: 'redis://127.0.0.1:4242',
  owned,
  ...(adopted ? { adopted } : {}),
  release: async () => undefined,
});

describe('the dashboard notice on a private Redis', () => {
  it('says how the dashboard came to the server, where its data is and how its sessions run', () => {
    const where = dataDir();
    expect(privateRedisNotice(server(true))).toBe(
      `orq: REDIS_URL is not set: serving the private Redis in ${where} (started for this dashboard) at redis://127.0.0.1:4242; ` +
        "only `orq run` and the `--run` commands in this directory run its sessions. Set REDIS_URL to serve your pods' Redis\n",
    );
    expect(privateRedisNotice(server(false))).toContain('(shared with the orq commands here)');
    expect(privateRedisNotice(server(true, true))).toContain(
      '(taken over from an earlier orq command that left it running)',
    );
  });
});
