import { ImageName, getContainerRuntimeClient, type ContainerRuntimeClient } from 'testcontainers';

// The container engine as testcontainers finds it (DOCKER_HOST, ~/.testcontainers.properties,
// the default socket), for the tests' Redis servers (test-redis.ts) and one-shot containers.

// Ryuk (testcontainers' reaper) is an image to pull, which CI cannot: a run removes its own
// containers by label instead (removeRunContainers). With a /.dockerenv, testcontainers would
// pull another image to find the host; the containers are reached on this machine's ports.
process.env.TESTCONTAINERS_RYUK_DISABLED ??= 'true';
process.env.TESTCONTAINERS_HOST_OVERRIDE ??= 'localhost';

/** The label of every container a test run starts, with the run's id as its value. */
export const RUN_LABEL = 'orq.test.run';

let client: Promise<ContainerRuntimeClient> | undefined;
export function runtimeClient(): Promise<ContainerRuntimeClient> {
  client ??= getContainerRuntimeClient();
  return client;
}

/** Why no container engine answers, or undefined when one does. */
export async function noContainerEngine(): Promise<string | undefined> {
  return runtimeClient().then(
    () => undefined,
    (error: unknown) => (error as Error).message,
  );
}

/** Whether the engine has `image` already (built here, or pulled before). */
export async function hasImage(image: string): Promise<boolean> {
  return imageExists(await runtimeClient(), image);
}

export async function imageExists(
  runtime: ContainerRuntimeClient,
  image: string,
): Promise<boolean> {
  return runtime.image.exists(ImageName.fromString(image)).catch(() => false);
}

/** Pulls `image` unless the engine has it: why it could not, or undefined once it has it. */
export async function pullImage(image: string): Promise<string | undefined> {
  const runtime = await runtimeClient();
  if (await imageExists(runtime, image)) return undefined;
  return runtime.image.pull(ImageName.fromString(image)).then(
    () => undefined,
    (error: unknown) => (error as Error).message,
  );
}

/** What a one-shot container printed (stdout and stderr together) and its exit code. */
export interface OneShot {
  code: number;
  output: string;
}

export interface OneShotOptions {
  image: string;
  /** The run's id, for RUN_LABEL. */
  runId: string;
  command: string[];
  workdir: string;
  user: string;
  env: Record<string, string>;
  /** Empty, writable folders of the container's own. */
  tmpfs: string[];
  mounts: { source: string; target: string; mode: 'ro' | 'rw' }[];
}

/**
 * Runs `command` in a new container of `image` on this machine's network (the test's Redis is on
 * its loopback) until it exits, then removes the container.
 */
export async function runOnce(options: OneShotOptions): Promise<OneShot> {
  const runtime = await runtimeClient();
  const { dockerode } = runtime.container;
  if (!(await imageExists(runtime, options.image))) {
    await runtime.image.pull(ImageName.fromString(options.image));
  }
  const container = await dockerode.createContainer({
    Image: options.image,
    Cmd: options.command,
    WorkingDir: options.workdir,
    User: options.user,
    Env: Object.entries(options.env).map(([k, v]) => `${k}=${v}`),
    Labels: { [RUN_LABEL]: options.runId },
    HostConfig: {
      NetworkMode: 'host',
      Binds: options.mounts.map((m) => `${m.source}:${m.target}:${m.mode}`),
      Tmpfs: Object.fromEntries(options.tmpfs.map((path) => [path, 'rw,mode=1777'])),
    },
  });
  try {
    await container.start();
    const { StatusCode } = (await container.wait()) as { StatusCode: number };
    const logs = await container.logs({ stdout: true, stderr: true });
    return { code: StatusCode, output: demux(logs) };
  } finally {
    await container.remove({ force: true });
  }
}

/** Docker's multiplexed log stream (8-byte frame headers) as text. */
function demux(buffer: Buffer): string {
  let text = '';
  for (let at = 0; at + 8 <= buffer.length;) {
    const size = buffer.readUInt32BE(at + 4);
    text += buffer.subarray(at + 8, at + 8 + size).toString();
    at += 8 + size;
  }
  return text;
}

/** Removes every container of the run (stopped ones too: a test may have stopped its Redis). */
export async function removeRunContainers(runId: string): Promise<number> {
  const { dockerode } = (await runtimeClient()).container;
  const mine = await dockerode.listContainers({
    all: true,
    filters: { label: [`${RUN_LABEL}=${runId}`] },
  });
  await Promise.all(mine.map((c) => dockerode.getContainer(c.Id).remove({ force: true, v: true })));
  return mine.length;
}
