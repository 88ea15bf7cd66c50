import { describe, expect, it } from 'vitest';
import { createLogger } from '../../src/shared/logger.js';
import { createConnection, unprotectedRedisHost } from '../../src/shared/redis.js';

describe('a Redis on the network without a password (issue 41)', () => {
  it('is told apart from a local or protected one', () => {
    expect(unprotectedRedisHost('redis://10.0.0.5:6379')).toBe('10.0.0.5');
    expect(unprotectedRedisHost('rediss://redis.example.com')).toBe('redis.example.com');
    expect(unprotectedRedisHost({ host: '10.0.0.5' })).toBe('10.0.0.5');
    expect(unprotectedRedisHost({ cluster: ['redis://10.0.0.7:7000'] })).toBe('10.0.0.7');
    for (const input of [
      'redis://127.0.0.1:6379',
      'redis://localhost',
      'redis://[::1]:6379',
      'redis://:secret@10.0.0.5:6379',
      'redis://default:secret@10.0.0.5:6379',
      'redis://10.0.0.5:6379?password=secret',
      { host: '10.0.0.5', password: 'secret' },
      { path: '/tmp/redis.sock' },
      {},
      { cluster: ['redis://10.0.0.7:7000'], options: { redisOptions: { password: 'x' } } },
    ]) {
      expect(unprotectedRedisHost(input), JSON.stringify(input)).toBeUndefined();
    }
  });

  it('is warned about once when a connection is made', () => {
    const lines: { level: number; msg: string }[] = [];
    const logger = createLogger({
      level: 'warn',
      destination: { write: (line: string) => lines.push(JSON.parse(line) as never) },
    });
    // 192.0.2.0/24 is reserved for documentation: nothing answers there.
    for (let i = 0; i < 2; i += 1) {
      const redis = createConnection({ host: '192.0.2.1', lazyConnect: true }, 'producer', logger);
      redis.disconnect();
    }
    const warnings = lines.filter((line) => line.msg.includes('without a password'));
    expect(warnings).toHaveLength(1);
    expect(warnings[0]!.msg).toContain('Redis at 192.0.2.1 is reached without a password');
  });
});
