import { mkdirSync } from 'node:fs';
import { GenericContainer, ImageName, Wait, type StartedTestContainer } from 'testcontainers';
import { inject } from 'vitest';
import {
  findRedisServer,
  freePort,
  redisAnswers,
  startPrivateRedis,
  type PrivateRedis,
} from '../../src/shared/redis-server.js';
import { RUN_LABEL, imageExists, runtimeClient } from './containers.js';

// Every Redis the tests need comes from here: a container (testcontainers) when a container
// engine is reachable, else the redis-server binary as before. The global setup decides once per
// run (chooseRedisServers) and says which; the test files read the decision through inject.

/** The image CI builds (scripts/test-images.sh); official `redis:7` elsewhere. */
export const LOCAL_IMAGE = 'orq-test-redis:local';
const OFFICIAL_IMAGE = 'redis:7';
/** `runId` is the value of RUN_LABEL on every container the run starts, one-shot ones too. */
export type RedisServers =
  | { way: 'container'; image: string; runId: string }
  | { way: 'binary'; why: string; runId: string };

declare module 'vitest' {
  export interface ProvidedContext {
    redisServers: RedisServers;
  }
}

export class TestRedisUnavailable extends Error {}

/**
 * How this run gets its servers. ORQ_TEST_REDIS_SERVERS=container|binary asks for one way;
 * unset, a reachable container engine wins. The image: ORQ_TEST_REDIS_IMAGE, else the local one
 * if built here, else the official one (pulled by the engine).
 */
export async function chooseRedisServers(env = process.env): Promise<RedisServers> {
  const asked = env.ORQ_TEST_REDIS_SERVERS;
  if (asked && asked !== 'container' && asked !== 'binary') {
    throw new TestRedisUnavailable(
      `ORQ_TEST_REDIS_SERVERS=${asked}: say container or binary, or leave it unset`,
    );
  }
  const runId = env.ORQ_TEST_RUN_ID ?? `${process.pid}-${Date.now()}`;
  if (asked === 'binary') return { way: 'binary', why: 'ORQ_TEST_REDIS_SERVERS=binary', runId };
  const client = await runtimeClient().catch((error: unknown) => error as Error);
  // Without a usable engine: the binary, unless the container way was asked for.
  const binaryInstead = (why: string, hint: string): RedisServers => {
    if (asked === 'container') {
      throw new TestRedisUnavailable(`ORQ_TEST_REDIS_SERVERS=container, but ${why}. ${hint}`);
    }
    if (!findRedisServer()) {
      throw new TestRedisUnavailable(
        'The tests need a Redis: install redis-server (Debian: apt-get install redis-server) ' +
          `or start a container engine (Docker) that has a Redis image; ${why}. ${hint}`,
      );
    }
    return { way: 'binary', why, runId };
  };
  if (client instanceof Error) {
    return binaryInstead(`no container engine answers (${client.message})`, '');
  }
  const image =
    env.ORQ_TEST_REDIS_IMAGE ??
    ((await imageExists(client, LOCAL_IMAGE)) ? LOCAL_IMAGE : OFFICIAL_IMAGE);
  if (!(await imageExists(client, image))) {
    // Pulled once here, not by each test file; where no registry answers, say what to do.
    const refused = await client.image.pull(ImageName.fromString(image)).then(
      () => undefined,
      (error: unknown) => (error as Error).message,
    );
    if (refused !== undefined) {
      return binaryInstead(
        `the container engine cannot get the image ${image} (${refused})`,
        "scripts/test-images.sh builds a local one from this machine's redis-server; " +
          'ORQ_TEST_REDIS_IMAGE names another.',
      );
    }
  }
  return { way: 'container', image, runId };
}

export function describeRedisServers(servers: RedisServers): string {
  return servers.way === 'container'
    ? `tests: Redis servers are containers of ${servers.image} (testcontainers, run ${servers.runId})`
    : `tests: Redis servers are redis-server processes (${servers.why})`;
}

/** A Redis of the test's own: stop() takes it away, start() brings it back with its data. */
export interface TestRedis {
  url: string;
  port: number;
  /** Stops the server as a crash would not: SIGTERM, so AOF is flushed, as a pod's Redis stops. */
  stop(): Promise<void>;
  /** Starts it again on the same port, with the data it kept (AOF), as a restarted pod. */
  start(): Promise<void>;
}

export interface TestRedisOptions {
  /** The binary's working directory (AOF files); a container keeps its own. */
  dir: string;
  appendonly?: boolean;
  port?: number;
  /** More redis-server options (maxmemory-policy, rename-command, requirepass...). */
  args?: readonly string[];
}

/** The servers of this run, as the global setup decided; outside vitest, decided here. */
let decided: Promise<RedisServers> | undefined;
/** For the global setup, which decides before any test file runs. */
export function useRedisServers(servers: RedisServers): void {
  decided = Promise.resolve(servers);
}
export function redisServers(): Promise<RedisServers> {
  decided ??= (async () => {
    try {
      return inject('redisServers');
    } catch {
      return chooseRedisServers();
    }
  })();
  return decided;
}

/** The options every server gets, the binary's and the container's alike. */
function serverArgs(options: TestRedisOptions, port: number, dir: string): string[] {
  return [
    '--port',
    String(port),
    '--dir',
    dir,
    '--maxmemory-policy',
    'noeviction',
    '--save',
    '',
    '--appendonly',
    options.appendonly ? 'yes' : 'no',
    '--appendfsync',
    'everysec',
    ...(options.args ?? []),
  ];
}

// The official images run their server as `redis-server` (Valkey's as `valkey-server`, with a
// redis-server link in some versions): the first there is is the server, PID 1, so that a
// container stop is a SIGTERM to Redis itself.
const SERVER = 'exec "$(command -v redis-server || command -v valkey-server)" "$@"';

/** Tries at a free port before a server's start failure counts (see startTestRedis). */
const PORT_TRIES = 3;

export async function startTestRedis(options: TestRedisOptions): Promise<TestRedis> {
  const servers = await redisServers();
  const start = (port: number) =>
    servers.way === 'container'
      ? startContainerRedis(servers, options, port)
      : startBinaryRedis(options, port);
  if (options.port !== undefined) return start(options.port);
  // A port free when asked can be taken before the server binds it (another file's server, or
  // an outgoing connection's local port): the server then exits at once, and a container's
  // start fails with "Log stream ended". Seen once in a full run; so another port is tried.
  for (let tries = 1; ; tries += 1) {
    try {
      return await start(await freePort());
    } catch (error) {
      if (tries >= PORT_TRIES) throw error;
    }
  }
}

async function startBinaryRedis(options: TestRedisOptions, port: number): Promise<TestRedis> {
  const start = () =>
    startPrivateRedis({
      dir: options.dir,
      port,
      appendonly: options.appendonly ?? false,
      args: options.args,
    });
  let server: PrivateRedis | undefined = await start();
  return {
    url: server.url,
    port,
    async stop() {
      await server?.stop();
      server = undefined;
    },
    async start() {
      server ??= await start();
    },
  };
}

/**
 * A server's container is reached on this machine's port of the same number (a restarted
 * container keeps it, so clients reconnect to the same URL). Where the engine runs containers on
 * this kernel (Linux), the container shares this machine's network, and its server listens on
 * 127.0.0.1 itself, as a redis-server process does. Publishing the port put Docker's userland
 * proxy (docker-proxy) between the tests and every Redis: it took about 17 µs of CPU per command
 * and made commands 1.5 to 3 times as slow (redis-benchmark, 2 cores). Elsewhere (Docker
 * Desktop's virtual machine) the ports are published, and the server listens on every interface
 * of its container.
 */
const HOST_NETWORK = process.platform === 'linux';

function reachable(container: GenericContainer, ports: number[]): GenericContainer {
  return HOST_NETWORK
    ? container.withNetworkMode('host')
    : container.withExposedPorts(...ports.map((port) => ({ container: port, host: port })));
}

/** Where the server listens: see reachable(). */
const LISTEN = [
  '--bind',
  HOST_NETWORK ? '127.0.0.1' : '0.0.0.0',
  '--protected-mode',
  'no',
] as const;

async function startContainerRedis(
  servers: Extract<RedisServers, { way: 'container' }>,
  options: TestRedisOptions,
  port: number,
): Promise<TestRedis> {
  const container = await reachable(
    new GenericContainer(servers.image)
      .withEntrypoint(['sh', '-c', SERVER, 'redis-server'])
      .withCommand([...serverArgs(options, port, '/data'), ...LISTEN]),
    [port],
  )
    .withLabels({ [RUN_LABEL]: servers.runId })
    .withWaitStrategy(Wait.forLogMessage(/Ready to accept connections/))
    .withStartupTimeout(30_000)
    .start();
  return containerHandle(container, port);
}

function containerHandle(container: StartedTestContainer, port: number): TestRedis {
  const url = `redis://127.0.0.1:${port}`;
  const docker = async () => {
    const runtime = await runtimeClient();
    return { runtime, handle: runtime.container.getById(container.getId()) };
  };
  let running = true;
  return {
    url,
    port,
    async stop() {
      if (!running) return;
      const { runtime, handle } = await docker();
      await runtime.container.stop(handle, { timeout: 10 });
      running = false;
    },
    async start() {
      if (running) return;
      const { runtime, handle } = await docker();
      await runtime.container.start(handle);
      running = true;
      await waitForPing(url, 30_000);
    },
  };
}

async function waitForPing(url: string, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await redisAnswers(url))) {
    if (Date.now() > deadline) throw new Error(`the restarted Redis did not answer on ${url}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** The nodes of a Redis Cluster (not yet formed): their ports and cluster-bus ports. */
export interface ClusterNodes {
  ports: number[];
  busPorts: number[];
  stop(): Promise<void>;
}

/**
 * `size` cluster-enabled servers, not yet meeting. Binary: one redis-server each. Container: all
 * in one container, reached as reachable() says: they meet on 127.0.0.1 (this machine's, or the
 * container's own), and announce it with ports that are the same on this machine, so a client
 * here reaches each of them.
 */
export async function startClusterNodes(size: number, dir: string): Promise<ClusterNodes> {
  const servers = await redisServers();
  const ports: number[] = [];
  const busPorts: number[] = [];
  for (let i = 0; i < size; i += 1) {
    ports.push(await freePort());
    busPorts.push(await freePort());
  }
  const clusterArgs = (i: number) => [
    '--cluster-enabled',
    'yes',
    '--cluster-config-file',
    `nodes-${ports[i]}.conf`,
    // The bus port is chosen too: the default (port + 10000) may be taken or out of range.
    '--cluster-port',
    String(busPorts[i]),
    '--cluster-node-timeout',
    '5000',
  ];
  if (servers.way === 'binary') {
    const started: PrivateRedis[] = [];
    try {
      for (let i = 0; i < size; i += 1) {
        const nodeDir = `${dir}/node${i}`;
        mkdirSync(nodeDir, { recursive: true });
        started.push(
          await startPrivateRedis({
            dir: nodeDir,
            port: ports[i],
            appendonly: false,
            args: clusterArgs(i),
          }),
        );
      }
    } catch (error) {
      await Promise.all(started.map((s) => s.stop()));
      throw error;
    }
    return {
      ports,
      busPorts,
      stop: async () => void (await Promise.all(started.map((s) => s.stop()))),
    };
  }
  const launch = ports
    .map((port, i) => {
      const args = [
        ...serverArgs({ dir: '/data' }, port, '/data'),
        ...clusterArgs(i),
        '--cluster-announce-ip',
        '127.0.0.1',
        ...LISTEN,
      ];
      return `"$server" ${args.map((a) => `'${a}'`).join(' ')} &`;
    })
    .join('\n');
  const container = await reachable(
    new GenericContainer(servers.image).withEntrypoint([
      'sh',
      '-c',
      `server="$(command -v redis-server || command -v valkey-server)"\n${launch}\nwait`,
    ]),
    ports,
  )
    .withLabels({ [RUN_LABEL]: servers.runId })
    .withWaitStrategy(Wait.forLogMessage(/Ready to accept connections/, size))
    .withStartupTimeout(30_000)
    .start();
  // sh, PID 1, passes no SIGTERM on: nothing to flush in a cluster the tests throw away.
  return { ports, busPorts, stop: async () => void (await container.stop({ timeout: 0 })) };
}
