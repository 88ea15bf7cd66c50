import { randomUUID } from 'node:crypto';
import { afterEach, inject } from 'vitest';
import { parseConfig } from '../../src/shared/config/load.js';
import type { OrqConfig, OrqConfigInput } from '../../src/shared/config/schema.js';
import { silentLogger } from '../../src/shared/logger.js';
import type { Role } from '../../src/shared/queues.js';
import { createClient, type OrqClient } from '../../src/producers/client.js';
import { startRoles, type RunningRoles } from '../../src/workers/registry.js';
import type { RoleModels } from '../../src/workers/llm/types.js';
import type { AgentModelFactory } from '../../src/workers/executors/agent/executor.js';

export const ALL_ROLES: Role[] = ['planner', 'judge', 'worker', 'replanner', 'coordinator'];

export interface TestCluster {
  prefix: string;
  config: OrqConfig;
  client: OrqClient;
  pods: RunningRoles[];
  startPod(
    roles?: Role[],
    options?: { concurrency?: number; models?: RoleModels },
  ): Promise<RunningRoles>;
  close(): Promise<void>;
}

/** Roles in this process against the test Redis, under a prefix of its own. */
export async function startCluster(
  options: {
    config?: OrqConfigInput;
    pods?: number;
    roles?: Role[];
    models?: RoleModels;
    /** How often pods read the state of sessions with model calls in flight. */
    cancelPollMs?: number;
    /** The agent executor's model in every pod (a scripted one). */
    agentModel?: AgentModelFactory;
  } = {},
): Promise<TestCluster> {
  const url = inject('redisUrl');
  const prefix = `t${randomUUID().slice(0, 8)}`;
  const config = parseConfig({ ...(options.config ?? {}), redis: { prefix } });
  const pods: RunningRoles[] = [];
  const startPod = async (
    roles: Role[] = options.roles ?? ALL_ROLES,
    podOptions: { concurrency?: number; models?: RoleModels } = {},
  ) => {
    const pod = await startRoles({
      roles,
      connection: url,
      config,
      logger: silentLogger,
      ...(podOptions.concurrency ? { concurrency: podOptions.concurrency } : {}),
      ...(options.cancelPollMs !== undefined ? { cancelPollMs: options.cancelPollMs } : {}),
      ...(options.agentModel ? { agentModel: options.agentModel } : {}),
      ...((podOptions.models ?? options.models)
        ? { models: podOptions.models ?? options.models }
        : {}),
    });
    pods.push(pod);
    return pod;
  };
  for (let i = 0; i < (options.pods ?? 1); i += 1) await startPod();
  const client = await createClient({ connection: url, config });
  return {
    prefix,
    config,
    client,
    pods,
    startPod,
    async close() {
      await client.close();
      await Promise.all(pods.map((p) => p.close(5_000)));
    },
  };
}

/**
 * For files whose tests each start their own cluster: `const startCluster = clusterPerTest();`
 * at the top of the file (or of a describe) starts clusters like startCluster, and closes the
 * ones a test started after that test. Files that share one cluster start it in beforeAll and
 * close it in afterAll instead.
 */
export function clusterPerTest(): typeof startCluster {
  const started: TestCluster[] = [];
  afterEach(async () => {
    const closing = started.splice(0);
    await Promise.all(closing.map((cluster) => cluster.close()));
  });
  return async (options) => {
    const cluster = await startCluster(options);
    started.push(cluster);
    return cluster;
  };
}
