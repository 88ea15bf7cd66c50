import { z } from 'zod';
import { RedisConfig } from './config/schema.js';

/**
 * The `connection` of createClient and startRoles: a URL as `redis.url` takes it, ioredis
 * options, or `{ cluster: [urls] }`. Refusing anything else matters most for `undefined`
 * (`process.env.REDIS_URL!` with the variable unset): ioredis reads it as "the defaults" and
 * connects to 127.0.0.1:6379, whoever's Redis that is.
 */
export const ConnectionOption = z.union([RedisConfig.shape.url.unwrap(), z.looseObject({})], {
  error: (issue) =>
    `expected a Redis URL (e.g. redis://127.0.0.1:6379), ioredis options or { cluster: [urls] }, got ${issue.input === null ? 'null' : typeof issue.input}`,
});
