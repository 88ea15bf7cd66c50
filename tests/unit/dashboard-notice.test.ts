import { afterEach, describe, expect, it } from 'vitest';
import { privateRedisNotice } from '../../src/producers/cli/commands/dashboard-serve.js';
import { privateRedisStartNotice } from '../../src/producers/cli/run-here.js';
import { privateRedisDir, type CliRedis } from '../../src/producers/cli/redis-for-cli.js';

const server = (owned: boolean, adopted?: boolean): CliRedis => ({
  url: 'redis://127.0.0.1:4242',
  connection: 'redis://127.0.0.1:4242',
  owned,
  ...(adopted ? { adopted } : {}),
  release: async () => undefined,
});

const savedDataDir = process.env.ORQ_DATA_DIR;
afterEach(() => {
  if (savedDataDir === undefined) delete process.env.ORQ_DATA_DIR;
  else process.env.ORQ_DATA_DIR = savedDataDir;
});

describe('where the private Redis keeps its data, as the notices name it', () => {
  it('is .orq/redis by default, relative to the working directory', () => {
    delete process.env.ORQ_DATA_DIR;
    expect(privateRedisDir()).toBe('.orq/redis');
  });

  it('follows ORQ_DATA_DIR, relative under the working directory and absolute elsewhere', () => {
    process.env.ORQ_DATA_DIR = 'state/orq';
    expect(privateRedisDir()).toBe('state/orq/redis');
    process.env.ORQ_DATA_DIR = '/var/lib/orq-data';
    expect(privateRedisDir()).toBe('/var/lib/orq-data/redis');
    process.env.ORQ_DATA_DIR = '../elsewhere';
    expect(privateRedisDir()).toMatch(/^\/.*\/elsewhere\/redis$/);
  });
});

describe('the dashboard notice on a private Redis', () => {
  it('says how the dashboard came to the server, where its data is and how its sessions run', () => {
    delete process.env.ORQ_DATA_DIR;
    expect(privateRedisNotice(server(true))).toBe(
      `orq: REDIS_URL is not set: serving the private Redis in .orq/redis (started for this dashboard) at redis://127.0.0.1:4242; ` +
        "only `orq run` and the `--run` commands in this directory run its sessions. Set REDIS_URL to serve your pods' Redis\n",
    );
    expect(privateRedisNotice(server(false))).toContain('(shared with the orq commands here)');
    expect(privateRedisNotice(server(true, true))).toContain(
      '(taken over from an earlier orq command that left it running)',
    );
  });
});

describe("orq run's notice on a private Redis", () => {
  it('names the data directory ORQ_DATA_DIR chose, and says nothing of a shared server', () => {
    process.env.ORQ_DATA_DIR = '/tmp/orq-somewhere';
    expect(privateRedisStartNotice(server(true))).toBe(
      'orq: started a private redis-server at redis://127.0.0.1:4242 (data in /tmp/orq-somewhere/redis)\n',
    );
    expect(privateRedisStartNotice(server(true, true))).toBe(
      'orq: took over the private redis-server at redis://127.0.0.1:4242 that an earlier orq left running (data in /tmp/orq-somewhere/redis)\n',
    );
    expect(privateRedisStartNotice(server(false))).toBeUndefined();
  });
});
