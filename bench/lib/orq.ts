import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Redis } from 'ioredis';
import { Queue, type Job } from 'bullmq';
import { parseConfig } from '../../src/shared/config/load.js';
import type { OrqConfig, OrqConfigInput } from '../../src/shared/config/schema.js';
import { Session, FINISHED_SESSION_STATES } from '../../src/shared/domain/session.js';
import type { ScenarioInput } from '../../src/shared/config/scenario.js';
import { silentLogger } from '../../src/shared/logger.js';
import { bullPrefix, type QueueName, type Role } from '../../src/shared/queues.js';
import { sessionKeys } from '../../src/shared/store/keys.js';
import { createClient, type OrqClient } from '../../src/producers/client.js';
import { startRoles, type RunningRoles } from '../../src/workers/registry.js';
import type { BenchTask } from './plans.js';
import { sleep } from './timing.js';

/** orq's configuration for a benchmark prefix: every default, quiet logs. */
export function benchConfig(prefix: string, overrides: OrqConfigInput = {}): OrqConfig {
  return parseConfig({ ...overrides, redis: { prefix }, logLevel: 'silent' }, 'bench config');
}

/**
 * Writes a scenario that scripts the builtin provider: the plan is `tasks`, judged acceptable
 * at once; executions and task judgements take the builtin's defaults (done on first try).
 */
export function writePlanScenario(dir: string, name: string, tasks: BenchTask[]): string {
  const scenario: ScenarioInput = {
    description: `benchmark plan ${name} (${tasks.length} tasks)`,
    plans: [{ summary: name, tasks }],
    planJudgements: [{ score: 95, isAcceptable: true }],
  };
  const path = join(dir, `${name}.json`);
  writeFileSync(path, JSON.stringify(scenario));
  return path;
}

export async function startInProcessRoles(
  url: string,
  config: OrqConfig,
  roles: Role[],
  options: { concurrency?: number; latencyMs?: number } = {},
): Promise<RunningRoles> {
  return startRoles({ roles, connection: url, config, logger: silentLogger, ...options });
}

export async function benchClient(url: string, config: OrqConfig): Promise<OrqClient> {
  return createClient({ connection: url, config });
}

export interface SessionRun {
  sessionId: string;
  /** Date.now() right before submit. */
  submittedAt: number;
  /** The session's updatedAt when it became COMPLETED (stamped by the coordinator). */
  completedAt: number;
  ms: number;
  session: Session;
}

/**
 * Submits one session scripted by `scenarioPath` and waits until it is COMPLETED. Polls the
 * session's state field (one HGET); the end time is the coordinator's own COMPLETED stamp, so
 * the polling interval does not enter the measurement.
 */
export async function runSession(
  client: OrqClient,
  admin: Redis,
  prefix: string,
  scenarioPath: string,
  options: { timeoutMs?: number; instruction?: string } = {},
): Promise<SessionRun> {
  const submittedAt = Date.now();
  const submitted = await client.submit({
    instruction: options.instruction ?? 'benchmark session',
    config: { llm: { scenario: scenarioPath } },
  });
  const session = await waitForSessionEnd(admin, prefix, submitted.id, options.timeoutMs);
  const completedAt = Date.parse(session.updatedAt);
  return {
    sessionId: session.id,
    submittedAt,
    completedAt,
    ms: completedAt - submittedAt,
    session,
  };
}

export async function waitForSessionEnd(
  admin: Redis,
  prefix: string,
  sessionId: string,
  timeoutMs = 600_000,
): Promise<Session> {
  const meta = sessionKeys(prefix, sessionId).meta;
  const { data } = await pollSessionEnd(admin, meta, sessionId, timeoutMs);
  const session = Session.parse(JSON.parse(data));
  if (session.state !== 'COMPLETED') {
    throw new Error(
      `benchmark session ${sessionId} ended ${session.state}: ${session.failure?.reason ?? 'no reason recorded'}`,
    );
  }
  return session;
}

/**
 * Polls the state field of a session's `meta` hash (one HGET every 10 ms) until the session
 * stops moving (finished or BLOCKED); returns that state and the session record as stored.
 */
export async function pollSessionEnd(
  admin: Redis,
  meta: string,
  sessionId: string,
  timeoutMs = 600_000,
): Promise<{ state: string; data: string }> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const state = await admin.hget(meta, 'state');
    if (state && (FINISHED_SESSION_STATES as readonly string[]).concat('BLOCKED').includes(state)) {
      return { state, data: (await admin.hget(meta, 'data')) ?? '{}' };
    }
    if (Date.now() > deadline)
      throw new Error(`session ${sessionId} still ${state} after ${timeoutMs}ms`);
    await sleep(10);
  }
}

/** Completed jobs of one orq queue (BullMQ keeps them, with processedOn / finishedOn). */
export async function completedJobs(
  admin: Redis,
  prefix: string,
  queue: QueueName,
): Promise<Job[]> {
  const q = new Queue(queue, { connection: admin, prefix: bullPrefix(prefix) });
  try {
    return await q.getJobs(['completed'], 0, -1);
  } finally {
    await q.close();
  }
}
