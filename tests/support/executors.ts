import { randomUUID } from 'node:crypto';
import { type RedisConnection, createConnection } from '../../src/shared/redis.js';
import type { z } from 'zod';
import { inject } from 'vitest';
import { SessionConfig } from '../../src/shared/config/schema.js';
import { Session, type Session as SessionType } from '../../src/shared/domain/session.js';
import { Task, type TaskInput } from '../../src/shared/domain/task.js';
import type { HistoryEntry } from '../../src/shared/domain/history.js';
import type { ProgressUpdate } from '../../src/shared/domain/progress.js';
import { createBuiltinModels } from '../../src/workers/llm/builtin.js';
import { silentLogger } from '../../src/shared/logger.js';
import { SessionStore } from '../../src/shared/store/session-store.js';
import { storeStepHistory } from '../../src/workers/executors/step-history.js';
import type { ExecutorContext, StepHistory } from '../../src/workers/executors/types.js';

/** A real SessionStore on the test Redis under a prefix of its own, for executor-level tests. */
export function openStore(): { store: SessionStore; redis: RedisConnection; close(): void } {
  const redis = createConnection(inject('redisUrl'), 'consumer', silentLogger);
  const store = new SessionStore(redis, `x${randomUUID().slice(0, 8)}`);
  return { store, redis, close: () => redis.disconnect() };
}

export function makeSession(
  config: z.input<typeof SessionConfig> = {},
  instruction = 'Write the notes',
): SessionType {
  const now = new Date().toISOString();
  return Session.parse({
    id: randomUUID(),
    instruction,
    state: 'RUNNING',
    createdAt: now,
    updatedAt: now,
    requiredTerms: { terms: [], source: 'user-input' },
    config: SessionConfig.parse(config),
    planning: {},
  });
}

/** Task t1 as the worker runs it (attempt 1) and a model call gets it. */
export const runningTask = Task.parse({
  id: 't1',
  title: 'Write the parser',
  acceptance: 'parses',
  state: 'RUNNING',
  replanningInfo: { iteration: 0, maxIterations: 3 },
});

/**
 * Stores the session's record, as a submit does: the step history writes only to a session
 * that has one (a deleted session's late steps are dropped). Again for the same session: no-op.
 */
export async function recordSession(store: SessionStore, session: SessionType): Promise<void> {
  await store.apply(session.id, {
    eventId: `submit|${session.id}`,
    session: { record: session, expectedVersion: 0 },
  });
}

/**
 * The context the worker builds for an executor, with the step history on the real store. The
 * session's record is stored first (the history waits for it), as a running session has one.
 */
export function executorContext(
  store: SessionStore,
  session: SessionType,
  task: TaskInput,
  options: {
    attempt?: number;
    signal?: AbortSignal;
    feedback?: string;
    progress?: (update: ProgressUpdate) => void;
  } = {},
): ExecutorContext {
  const parsed = Task.parse(task);
  const attempt = options.attempt ?? 1;
  return {
    session,
    task: parsed,
    attempt,
    dependencyResults: [],
    ...(options.feedback ? { feedback: options.feedback } : {}),
    models: createBuiltinModels(),
    // Unmetered: executor-level tests have no usage store (the worker role meters).
    meterChat: (provider) => provider,
    history: afterRecorded(
      recordSession(store, session),
      storeStepHistory(store, session, parsed.id, attempt),
    ),
    progress: options.progress ?? (() => undefined),
    signal: options.signal ?? new AbortController().signal,
    logger: silentLogger,
    jobAttempt: 0,
  };
}

export async function historyOf(store: SessionStore, sessionId: string): Promise<HistoryEntry[]> {
  return (await store.history(sessionId)).map((h) => h.entry);
}

function afterRecorded(recorded: Promise<void>, history: StepHistory): StepHistory {
  return {
    append: async (...args) => {
      await recorded;
      return history.append(...args);
    },
    load: async () => {
      await recorded;
      return history.load();
    },
  };
}
