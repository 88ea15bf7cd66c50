import { Cluster, Redis, type ClusterOptions, type RedisOptions } from 'ioredis';
import { OrqError } from './errors.js';
import type { Logger } from './logger.js';
import { isLoopbackHost } from './loopback.js';
import { nextOutage, UP, type OutageEvent, type OutageState } from './outage.js';

/** A connection to one Redis server or to a Redis Cluster: ioredis's two clients. */
export type RedisConnection = Redis | Cluster;

/**
 * Defines each Lua script as a command on `redis` (`name: [number of keys, script]`) unless the
 * connection has it already: stores sharing one connection define their scripts once, and a
 * script defined on the connection can be called in its pipelines too.
 */
export function defineScripts(
  redis: RedisConnection,
  scripts: Record<string, readonly [numberOfKeys: number, lua: string]>,
): void {
  const commands = redis as unknown as Record<string, unknown>;
  for (const [name, [numberOfKeys, lua]] of Object.entries(scripts)) {
    if (typeof commands[name] !== 'function') redis.defineCommand(name, { numberOfKeys, lua });
  }
}

/**
 * A Redis Cluster, by seed nodes (`redis://` or `rediss://` URLs; the client finds the other
 * nodes itself). Credentials and TLS of the first URL apply to every node.
 */
export interface ClusterInput {
  cluster: readonly string[];
  options?: ClusterOptions;
}

export type ConnectionInput = string | RedisOptions | ClusterInput;

const isCluster = (input: ConnectionInput): input is ClusterInput =>
  typeof input === 'object' && Array.isArray((input as Partial<ClusterInput>).cluster);

/** What a configuration names: `redis.url`, as a Cluster's seed node when `redis.cluster`. */
export function configuredConnection(config: {
  redis: { url?: string | undefined; cluster: boolean };
}): ConnectionInput | undefined {
  const { url, cluster } = config.redis;
  if (cluster && !url) {
    throw new OrqError('CONFIG_INVALID', 'redis.cluster is set, but redis.url is not', {
      hint: 'Set REDIS_URL (or redis.url) to one node of the cluster, e.g. redis://node-1:7000.',
    });
  }
  if (!url) return undefined;
  return cluster ? { cluster: [url] } : url;
}

/** The host of a `redis://` URL without a password, if it is not loopback. */
function unprotectedUrlHost(address: string, password?: string): string | undefined {
  let url: URL;
  try {
    url = new URL(address);
  } catch {
    return undefined;
  }
  if (url.protocol !== 'redis:' && url.protocol !== 'rediss:') return undefined;
  if (url.password || url.searchParams.get('password') || password) return undefined;
  return isLoopbackHost(url.hostname) ? undefined : url.hostname;
}

/**
 * The address of a Redis that anyone on the network may reach without a password (issue 41):
 * not loopback, no password in the URL or the options. Undefined when protected, local or a
 * socket. Redis itself may still refuse strangers (protected mode, a firewall): this is a hint.
 */
export function unprotectedRedisHost(input: ConnectionInput): string | undefined {
  if (isCluster(input)) {
    const password = input.options?.redisOptions?.password;
    return input.cluster.map((seed) => unprotectedUrlHost(seed, password)).find(Boolean);
  }
  if (typeof input === 'string') return unprotectedUrlHost(input);
  if (input.path || input.password) return undefined;
  const host = input.host ?? 'localhost';
  return isLoopbackHost(host) ? undefined : host;
}

/** Hosts warned about already: one warning per process, not one per connection. */
const warnedHosts = new Set<string>();

function warnIfUnprotected(input: ConnectionInput, logger: Logger): void {
  const host = unprotectedRedisHost(input);
  if (host === undefined || warnedHosts.has(host)) return;
  warnedHosts.add(host);
  logger.warn(
    { redisHost: host },
    `Redis at ${host} is reached without a password: anyone who can reach it can read every session (and its secrets) and add jobs. Set a password (requirepass, or an ACL user) and put it in REDIS_URL (redis://:<password>@${host}:6379), or keep Redis on a private network`,
  );
}

/**
 * Connections follow BullMQ's guidance: consumers retry forever (`maxRetriesPerRequest: null`)
 * so blocking reads survive a Redis restart; producers fail fast so a caller learns at once
 * that Redis is down instead of hanging.
 */
export function createConnection(
  input: ConnectionInput,
  kind: 'consumer' | 'producer',
  logger?: Logger,
  /** Where the connection's outages are told (default: one log of its own on `logger`). */
  outage: OutageLog | undefined = logger && new OutageLog(logger.child({ kind })),
): RedisConnection {
  const common: RedisOptions =
    kind === 'consumer'
      ? { maxRetriesPerRequest: null, enableReadyCheck: true }
      : {
          maxRetriesPerRequest: 1,
          enableOfflineQueue: false,
          connectTimeout: 5_000,
          retryStrategy: (times) => Math.min(times * 200, 2_000),
        };
  const redis = isCluster(input)
    ? createCluster(input, common)
    : typeof input === 'string'
      ? new Redis(input, { ...common, lazyConnect: false })
      : new Redis({ ...input, ...common });
  if (logger) warnIfUnprotected(input, logger);
  if (outage) {
    reportOutages(redis, outage);
  } else {
    // No log to tell: the commands reject with the error (ensureConnected says it first), and
    // ioredis would print each retry's as an "Unhandled error event" with its stack besides.
    redis.on('error', () => undefined);
  }
  return redis;
}

/** Tells `outage` of the connection's errors and of its being ready again. */
export function reportOutages(redis: RedisConnection, outage: OutageLog): void {
  redis.on('error', (error: Error) => outage.error(error));
  redis.on('ready', () => outage.ready());
}

/** How often an outage that goes on is reported again. */
const OUTAGE_REPEAT_MS = 30_000;

/**
 * Logs one connection's outages (outage.ts): when one starts, every 30 s while it lasts, and
 * when the connection is ready again, instead of a warning per failed reconnect. A role's
 * consumer feeds the errors of the connections BullMQ makes itself into its connection's log.
 */
export class OutageLog {
  private state: OutageState = UP;

  constructor(
    private readonly logger: Logger,
    private readonly repeatEveryMs = OUTAGE_REPEAT_MS,
    private readonly now: () => number = Date.now,
  ) {}

  error(error: Error): void {
    this.step({ type: 'error', error: error.message, at: this.now() });
  }

  ready(): void {
    this.step({ type: 'ready', at: this.now() });
  }

  private step(event: OutageEvent): void {
    const { state, report } = nextOutage(this.state, event, this.repeatEveryMs);
    this.state = state;
    if (report?.kind === 'down') {
      this.logger.warn({ err: report.error }, 'redis unreachable; reconnecting');
    } else if (report?.kind === 'still-down') {
      // `kind` stays out: the logger's own `kind` binding (consumer, producer) would be repeated.
      const { error, kind: _kind, ...counts } = report;
      this.logger.warn({ err: error, ...counts }, 'redis still unreachable; reconnecting');
    } else if (report?.kind === 'restored') {
      const { kind: _kind, ...counts } = report;
      this.logger.info(counts, 'redis connection restored');
    }
  }
}

function createCluster(input: ClusterInput, common: RedisOptions): Cluster {
  const [first] = input.cluster;
  if (!first) {
    throw new OrqError('CONFIG_INVALID', 'a Redis Cluster connection names no node', {
      hint: 'Give the URL of at least one node: { cluster: ["redis://node-1:7000"] }.',
    });
  }
  const seed = new URL(first);
  const auth: RedisOptions = {
    ...(seed.username ? { username: decodeURIComponent(seed.username) } : {}),
    ...(seed.password ? { password: decodeURIComponent(seed.password) } : {}),
    ...(seed.protocol === 'rediss:' ? { tls: {} } : {}),
  };
  // A Cluster takes its offline queue and reconnect strategy itself; the rest goes to each node
  // (BullMQ reads maxRetriesPerRequest from there).
  const { enableOfflineQueue, retryStrategy, ...perNode } = common;
  return new Cluster(
    input.cluster.map((url) => {
      const node = new URL(url);
      return { host: node.hostname, port: Number(node.port || 6379) };
    }),
    {
      ...input.options,
      ...(enableOfflineQueue !== undefined ? { enableOfflineQueue } : {}),
      ...(retryStrategy ? { clusterRetryStrategy: retryStrategy } : {}),
      redisOptions: { ...auth, ...input.options?.redisOptions, ...perNode },
    },
  );
}

/** Redis's answers to a missing or wrong password (AUTH or HELLO on connect). */
const AUTH_REFUSED = /^(NOAUTH|WRONGPASS|ERR invalid password)/;

/**
 * Where the caller's user set the Redis address, so a connection error's hint names what to
 * change: the CLI and the pods read REDIS_URL (or redis.url); a program using the library
 * passes createClient's `connection` option, and no environment variable is read.
 */
export type AddressSetting = 'REDIS_URL' | 'connection';

const ADDRESS_HINTS: Record<
  AddressSetting,
  {
    unreachable: string;
    noPassword: string;
    badCredentials: string;
    clusterNode: string;
    noDatabase: string;
  }
> = {
  REDIS_URL: {
    unreachable: 'Start Redis or set REDIS_URL to a reachable server.',
    noPassword:
      'Put it in REDIS_URL: redis://:PASSWORD@host:port, or redis://USER:PASSWORD@host:port.',
    badCredentials:
      'Check the user name and password in REDIS_URL (redis://USER:PASSWORD@host:port).',
    clusterNode: 'Set redis.cluster: true in the config file, or ORQ__redis__cluster=true.',
    noDatabase:
      'Name a database the server has in REDIS_URL (0 to 15 by default: its `databases` setting), or none for 0.',
  },
  connection: {
    unreachable:
      'Check the `connection` option of createClient: a Redis server must run at that address.',
    noPassword:
      'Give it in the `connection` option: redis://:PASSWORD@host:port or redis://USER:PASSWORD@host:port (ioredis options: `password`, `username`).',
    badCredentials:
      'Check the user name and password in the `connection` option (redis://USER:PASSWORD@host:port, or ioredis options `username` and `password`).',
    clusterNode:
      'Give the `connection` option the cluster\'s nodes: { cluster: ["redis://node-1:7000"] }.',
    noDatabase:
      'Name a database the server has in the `connection` option (redis://host:port/DB, or the ioredis option `db`; 0 to 15 by default: its `databases` setting), or none for 0.',
  },
};

function credentialsRefused(
  redis: RedisConnection,
  error: Error,
  where: unknown,
  setting: AddressSetting,
): OrqError {
  const missing = error.message.startsWith('NOAUTH');
  return new OrqError(
    'CONFIG_INVALID',
    `${describeConnection(redis)} ${missing ? 'requires a password' : "refused orq's user name or password"} (${error.message.replace(/\.$/, '')})`,
    {
      hint: missing ? ADDRESS_HINTS[setting].noPassword : ADDRESS_HINTS[setting].badCredentials,
      details: { address: where },
      cause: error,
    },
  );
}

const TLS_HINT = 'The URL asks for TLS (rediss://): if the server has no TLS, use redis://.';

/**
 * Connect errors no retry within the timeout helps with: nothing listens, the name does not
 * resolve, the socket file is missing or not ours. With why, in words, where the code is terse.
 */
const HOPELESS_CONNECT_ERRORS: Record<string, string> = {
  ECONNREFUSED: 'ECONNREFUSED',
  ENOTFOUND: 'ENOTFOUND',
  EAI_AGAIN: 'EAI_AGAIN',
  EHOSTUNREACH: 'EHOSTUNREACH',
  ENOENT: 'ENOENT: no such socket file',
  EACCES: 'EACCES: permission denied',
};

/**
 * Waits until the connection is ready, or throws REDIS_UNAVAILABLE with the address
 * (CONFIG_INVALID when the server refuses the credentials). `setting`: where the address was
 * set, for the hint.
 */
export async function ensureConnected(
  redis: RedisConnection,
  setting: AddressSetting,
  timeoutMs = 5_000,
): Promise<void> {
  if (redis.status === 'ready') return;
  const where = addressOf(redis);
  // A server without TLS often just waits on a TLS client's handshake: a timeout, not an error.
  const tls = !(redis instanceof Cluster) && Boolean(redis.options.tls);
  const unavailable = (reason: string) =>
    new OrqError('REDIS_UNAVAILABLE', `${describeConnection(redis)} is unreachable (${reason})`, {
      hint: `${ADDRESS_HINTS[setting].unreachable}${tls ? ` ${TLS_HINT}` : ''}`,
      details: { address: where },
    });
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => {
      cleanup();
      reject(unavailable(`no answer within ${timeoutMs} ms`));
    }, timeoutMs);
    const onReady = () => {
      cleanup();
      resolve();
    };
    const onError = (error: Error & { code?: string }) => {
      // The server answered but refused the credentials: it is up, and retrying cannot help.
      if (AUTH_REFUSED.test(error.message)) {
        cleanup();
        reject(credentialsRefused(redis, error, where, setting));
        return;
      }
      const reason = HOPELESS_CONNECT_ERRORS[error.code ?? ''];
      if (reason === undefined) return; // A reset or a timeout: the next retry may connect.
      cleanup();
      reject(unavailable(reason));
    };
    const cleanup = () => {
      clearTimeout(timer);
      redis.off('ready', onReady);
      redis.off('error', onError);
    };
    redis.on('ready', onReady);
    redis.on('error', onError);
  });
}

type Pipeline = ReturnType<RedisConnection['pipeline']>;
type PipelineReplies = NonNullable<Awaited<ReturnType<Pipeline['exec']>>>;

/** Items per batch of concurrent pipelines on a Redis Cluster. */
const CLUSTER_BATCH = 500;

/**
 * The replies of the commands `read` queues for each item (a session, say), in order: one
 * pipeline on a single server. On a Cluster a pipeline's keys must share a slot, and sessions
 * spread over all of them: one pipeline per item there, in concurrent batches.
 */
export async function pipelineEach<T>(
  redis: RedisConnection,
  items: readonly T[],
  read: (pipeline: Pipeline, item: T) => void,
): Promise<PipelineReplies> {
  if (!(redis instanceof Cluster)) {
    const pipeline = redis.pipeline();
    for (const item of items) read(pipeline, item);
    return (await pipeline.exec()) ?? [];
  }
  const replies: PipelineReplies = [];
  for (let start = 0; start < items.length; start += CLUSTER_BATCH) {
    const batch = await Promise.all(
      items.slice(start, start + CLUSTER_BATCH).map(async (item) => {
        const pipeline = redis.pipeline();
        read(pipeline, item);
        return (await pipeline.exec()) ?? [];
      }),
    );
    for (const one of batch) replies.push(...one);
  }
  return replies;
}

/** A twin of `redis` for blocking reads (XREAD BLOCK), which retries for ever. */
export function blockingTwin(redis: RedisConnection): RedisConnection {
  if (redis instanceof Cluster) {
    return redis.duplicate([], {
      enableOfflineQueue: true,
      redisOptions: { ...redis.options.redisOptions, maxRetriesPerRequest: null },
    });
  }
  return redis.duplicate({ maxRetriesPerRequest: null, enableOfflineQueue: true });
}

/** One wait per connection for its next `ready`, however many callers wait (no listener pile-up). */
const readyWaits = new WeakMap<RedisConnection, Promise<void>>();

/**
 * Waits until `redis` is ready: at once when it is, else until it reconnects. False when
 * `signal` aborts first; rejects as a lost connection (isTransportError) when it has ended for
 * good. For a caller that waits through outages on another connection and reads through this
 * one, which fails fast while it reconnects (enableOfflineQueue off) on a schedule of its own.
 */
export function untilReady(redis: RedisConnection, signal?: AbortSignal): Promise<boolean> {
  if (redis.status === 'ready') return Promise.resolve(true);
  if (redis.status === 'end') return Promise.reject(new Error('Connection is closed.'));
  if (signal?.aborted) return Promise.resolve(false);
  let wait = readyWaits.get(redis);
  if (!wait) {
    wait = new Promise<void>((resolve, reject) => {
      const settle = (outcome: () => void) => {
        redis.off('ready', onReady);
        redis.off('end', onEnd);
        readyWaits.delete(redis);
        outcome();
      };
      const onReady = () => settle(resolve);
      const onEnd = () => settle(() => reject(new Error('Connection is closed.')));
      redis.on('ready', onReady);
      redis.on('end', onEnd);
    });
    readyWaits.set(redis, wait);
  }
  const ready = wait;
  return new Promise<boolean>((resolve, reject) => {
    const onAbort = () => resolve(false);
    signal?.addEventListener('abort', onAbort, { once: true });
    ready.then(
      () => {
        signal?.removeEventListener('abort', onAbort);
        resolve(true);
      },
      (error: unknown) => {
        signal?.removeEventListener('abort', onAbort);
        reject(error as Error);
      },
    );
  });
}

/**
 * host:port of a single server, or its socket path (ioredis keeps its default host and port
 * beside a path, unused); `cluster` for a Cluster (its nodes change).
 */
function addressOf(redis: RedisConnection): string {
  if (redis instanceof Cluster) return 'cluster';
  if (redis.options.path) return redis.options.path;
  return `${redis.options.host ?? '?'}:${redis.options.port ?? '?'}`;
}

/** A connection, for messages. */
const describeConnection = (redis: RedisConnection): string =>
  redis instanceof Cluster ? 'The Redis Cluster' : `Redis at ${addressOf(redis)}`;

/**
 * A single-server connection to a node of a Redis Cluster would get MOVED for most keys, and
 * the roles would fail job after job: refuse it at once, naming the setting.
 */
async function refuseClusterNode(redis: RedisConnection, setting: AddressSetting): Promise<void> {
  if (redis instanceof Cluster) return;
  let info: string;
  try {
    info = await redis.info('cluster');
  } catch {
    return; // Managed services may forbid INFO: nothing to check then.
  }
  if (/cluster_enabled:1/.test(info)) {
    throw new OrqError(
      'CONFIG_INVALID',
      `${describeConnection(redis)} is a node of a Redis Cluster, but orq was not told to connect to a cluster`,
      { hint: ADDRESS_HINTS[setting].clusterNode },
    );
  }
}

/**
 * A database the server does not have (REDIS_URL ending /99 where Redis has 16): ioredis only
 * emits the SELECT's error and goes on in database 0, among other data. Refuse it instead.
 */
async function refuseMissingDatabase(
  redis: RedisConnection,
  setting: AddressSetting,
): Promise<void> {
  if (redis instanceof Cluster) return;
  const db = redis.options.db ?? 0;
  if (db === 0) return;
  try {
    await redis.select(db);
  } catch (error) {
    throw new OrqError(
      'CONFIG_INVALID',
      `${describeConnection(redis)} has no database ${db} (${error instanceof Error ? error.message : String(error)})`,
      {
        hint: ADDRESS_HINTS[setting].noDatabase,
        details: { db },
      },
    );
  }
}

/**
 * Refuses a server orq would misuse though it answers: a Cluster node reached as a single
 * server, or a database it does not have. Every client and pod checks both on connecting;
 * `setting` says where the caller set the address, for the hints.
 */
export async function refuseUnfitServer(
  redis: RedisConnection,
  setting: AddressSetting,
): Promise<void> {
  await refuseClusterNode(redis, setting);
  await refuseMissingDatabase(redis, setting);
}

/**
 * BullMQ loses jobs when Redis evicts keys: warn unless the policy is `noeviction`. Read from
 * INFO, as BullMQ does: managed services (ElastiCache) often refuse CONFIG but answer INFO.
 * Returns the policy, undefined when the server does not tell.
 */
export async function checkEvictionPolicy(
  redis: RedisConnection,
  logger: Logger,
): Promise<string | undefined> {
  let policy: string | undefined;
  try {
    policy = /^maxmemory_policy:(\S+)/m.exec(await redis.info('memory'))?.[1];
  } catch {
    return undefined;
  }
  if (policy && policy !== 'noeviction') {
    logger.warn(
      { policy },
      'Redis maxmemory-policy is not noeviction: queued jobs may be evicted and lost. Set `maxmemory-policy noeviction`.',
    );
  }
  return policy;
}

/** PING with a bound, so a probe or a scrape never hangs on a dead Redis. */
export async function pingRedis(redis: RedisConnection, timeoutMs = 2_000): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  try {
    const reply = await Promise.race([
      redis.ping(),
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error('PING timed out')), timeoutMs);
      }),
    ]);
    return reply === 'PONG';
  } catch {
    return false;
  } finally {
    clearTimeout(timer);
  }
}

/** Whether an error from ioredis (or BullMQ over it) means Redis could not be reached. */
export function isTransportError(error: unknown): boolean {
  const message = error instanceof Error ? error.message : String(error);
  // ioredis's MaxRetriesPerRequestError says "Reached the max retries per request limit".
  const name = error instanceof Error ? error.name : '';
  return (
    name === 'MaxRetriesPerRequestError' ||
    /Connection is closed|ECONNREFUSED|ECONNRESET|ETIMEDOUT|EPIPE|enableOfflineQueue|Stream isn't writeable|MaxRetriesPerRequest|max retries per request|ENOTFOUND|EAI_AGAIN|EHOSTUNREACH/i.test(
      message,
    )
  );
}

/** What went wrong with the connection, in words: ioredis's own text names its options. */
function transportReason(error: unknown): string | undefined {
  const message = error instanceof Error ? error.message : String(error);
  if (/ECONNREFUSED/.test(message)) return 'connection refused';
  if (/ENOTFOUND|EAI_AGAIN/.test(message)) return 'the host name does not resolve';
  if (/ETIMEDOUT/.test(message)) return 'the connection timed out';
  if (/EHOSTUNREACH/.test(message)) return 'no route to the host';
  if (/ECONNRESET|EPIPE|Connection is closed/.test(message)) return 'the connection was lost';
  if (/enableOfflineQueue|Stream isn't writeable/.test(message))
    return 'not connected, reconnecting';
  if (/max retries per request/i.test(message)) return 'the command failed on every retry';
  return undefined;
}

/**
 * Turns a transport error from ioredis into REDIS_UNAVAILABLE, leaving other errors alone.
 * `setting`: where the address was set, for the hint; `redis`: the connection, whose address
 * the message names. ioredis's own text stays in `cause`, for the logs.
 */
export function asRedisUnavailable(
  error: unknown,
  setting: AddressSetting = 'REDIS_URL',
  redis?: RedisConnection,
): unknown {
  if (error instanceof OrqError) return error;
  if (isTransportError(error)) {
    const reason = transportReason(error);
    const where = redis ? describeConnection(redis) : 'Redis';
    return new OrqError(
      'REDIS_UNAVAILABLE',
      `${where} is unreachable${reason ? ` (${reason})` : ''}`,
      {
        hint: ADDRESS_HINTS[setting].unreachable,
        ...(redis ? { details: { address: addressOf(redis) } } : {}),
        cause: error,
      },
    );
  }
  return error;
}
