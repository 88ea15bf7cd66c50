/**
 * What every part of a client shares: its config, its Redis connection, the stores and queues
 * read and written through it, and the blocking connections its watches open.
 */
import { z } from 'zod';
import { parseConfig, mergeConfig } from '../../shared/config/load.js';
import type { OrqConfig, OrqConfigInput } from '../../shared/config/schema.js';
import { ConnectionOption } from '../../shared/connection-option.js';
import { parseOrThrow } from '../../shared/errors.js';
import { LoggerOption, type Logger } from '../../shared/logger.js';
import { QueueSet } from '../../shared/queue-set.js';
import { defaultJobOptions } from '../../shared/queues.js';
import {
  asRedisUnavailable,
  createConnection,
  ensureConnected,
  OutageLog,
  refuseUnfitServer,
  reportOutages,
  type AddressSetting,
  type ConnectionInput,
  type RedisConnection,
} from '../../shared/redis.js';
import { SessionStore } from '../../shared/store/session-store.js';
import { UsageStore } from '../../shared/store/usage-store.js';
import { QuotaStore } from '../../shared/store/quota-store.js';
import { TaskViewCache } from '../../shared/store/task-view-cache.js';

export interface CreateClientOptions {
  connection: ConnectionInput;
  /** Redis key prefix (default from config, `orq`). */
  prefix?: string;
  /** Defaults for sessions this client submits; validated like a config file. */
  config?: OrqConfigInput | OrqConfig;
  /**
   * Where a Redis outage of the client's connection is told: once when it starts (again every
   * 30 s while it lasts) and once when Redis is back, as the roles tell theirs. Without one the
   * client says nothing: its calls reject with REDIS_UNAVAILABLE meanwhile.
   */
  logger?: Logger;
}

/**
 * The keys createClient takes, checked before anything connects: an unknown one (`prefx`) was
 * ignored, and the client worked under the default prefix, beside the roles it was meant for.
 * The prefix and config are checked by parseConfig, as a config file's.
 */
const ClientOptions = z.strictObject({
  connection: ConnectionOption,
  prefix: z.unknown().optional(),
  config: z.unknown().optional(),
  logger: LoggerOption.optional(),
} satisfies Record<keyof CreateClientOptions, z.ZodType>);

/** Sessions, and tasks in all, whose records one client keeps as get() read them. */
const TASK_CACHE_SESSIONS = 4;
const TASK_CACHE_TASKS = 20_000;

export class ClientContext {
  readonly prefix: string;
  readonly store: SessionStore;
  readonly usageStore: UsageStore;
  readonly quotaStore: QuotaStore;
  readonly queues: QueueSet;
  /** The watches' own connections (a blocking XREAD each), closed with the client. */
  readonly blockingConnections = new Set<RedisConnection>();
  readonly taskViews = new TaskViewCache(TASK_CACHE_SESSIONS, TASK_CACHE_TASKS);

  /**
   * Checks the options, connects, and refuses a Redis orq cannot work on. `addressSetting` says
   * where the user set the Redis address, so a connection error's hint names that.
   */
  static async open(
    options: CreateClientOptions,
    addressSetting: AddressSetting,
  ): Promise<ClientContext> {
    // A URL the config would refuse (http://…) otherwise waits out the connect timeout first.
    parseOrThrow(ClientOptions, options, 'client options');
    const config = parseConfig(
      mergeConfig(
        options.config ?? {},
        options.prefix ? { redis: { prefix: options.prefix } } : {},
      ),
      'client options',
    );
    const redis = createConnection(options.connection, 'producer');
    try {
      await ensureConnected(redis, addressSetting);
      await refuseUnfitServer(redis, addressSetting);
    } catch (error) {
      redis.disconnect();
      throw error;
    }
    // From here on: a Redis that cannot be reached at the start is the error thrown above.
    if (options.logger) {
      reportOutages(redis, new OutageLog(options.logger.child({ kind: 'producer' })));
    }
    return new ClientContext(config, redis, addressSetting);
  }

  private constructor(
    readonly config: OrqConfig,
    readonly redis: RedisConnection,
    readonly addressSetting: AddressSetting,
  ) {
    this.prefix = config.redis.prefix;
    this.store = new SessionStore(redis, this.prefix, config.queues.historyMaxLength);
    this.usageStore = new UsageStore(redis, this.prefix);
    this.quotaStore = new QuotaStore(redis, this.prefix);
    this.queues = new QueueSet(
      redis,
      this.prefix,
      defaultJobOptions(config.queues),
      config.queues.taskJobNames,
    );
  }

  /** Runs one call of the client: a Redis gone away fails it as REDIS_UNAVAILABLE. */
  async guard<T>(fn: () => Promise<T>): Promise<T> {
    try {
      return await fn();
    } catch (error) {
      throw asRedisUnavailable(error, this.addressSetting, this.redis);
    }
  }

  async close(): Promise<void> {
    for (const c of this.blockingConnections) c.disconnect();
    await this.queues.close();
    this.redis.disconnect();
  }
}
