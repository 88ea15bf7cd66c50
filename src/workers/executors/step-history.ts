import { appendFile, mkdir } from 'node:fs/promises';
import { dirname, resolve } from 'node:path';
import type { Session } from '../../shared/domain/session.js';
import type { SessionStore } from '../../shared/store/session-store.js';
import type { StepHistory } from './types.js';

/** `<directory>/<sessionId>/<taskId>.jsonl`: seed 004's planning_history file of one task. */
export function planningHistoryFile(directory: string, sessionId: string, taskId: string): string {
  return resolve(
    directory,
    sessionId,
    `${taskId.replace(/^\.+$/, (dots) => dots.replace(/\./g, '_'))}.jsonl`,
  );
}

/**
 * The StepHistory of one task attempt, over the session store. With
 * `planning.history.storage_type: jsonl` each newly recorded step is also appended to the
 * task's JSONL file (seed 004); the Redis stream stays the source of truth, and a step a
 * redelivered job writes again (DUPLICATE) is not appended twice.
 */
export function storeStepHistory(
  store: SessionStore,
  session: Session,
  taskId: string,
  attempt: number,
): StepHistory {
  const { history } = session.config.planning;
  const file =
    history.storage_type === 'jsonl'
      ? planningHistoryFile(history.directory, session.id, taskId)
      : undefined;
  return {
    async append(step, entry, plan) {
      const status = await store.appendTaskStep(session.id, taskId, attempt, step, entry, plan);
      if (status === 'OK' && file) {
        const line = {
          ...entry,
          timestamp: new Date().toISOString(),
          sessionId: session.id,
          taskId,
        };
        await mkdir(dirname(file), { recursive: true });
        await appendFile(file, `${JSON.stringify(line)}\n`);
      }
      return status;
    },
    load: () => store.loadTaskSteps(session.id, taskId, attempt),
  };
}

/** What a work job's BullMQ progress says while its task runs (Bull Board shows it). */
export interface StepProgress {
  /** The step just recorded (0 is the plan). */
  step: number;
  type: string;
  tool?: string;
}

/**
 * `history` that also reports each newly recorded step as the job's progress. Best effort: a
 * progress update that fails changes nothing about the step, which is recorded already.
 */
export function reportingProgress(
  history: StepHistory,
  report: (progress: StepProgress) => Promise<void>,
): StepHistory {
  return {
    load: () => history.load(),
    async append(step, entry, plan) {
      const status = await history.append(step, entry, plan);
      await report({
        step,
        type: entry.type,
        ...(entry.type === 'action' ? { tool: entry.tool } : {}),
      }).catch(() => undefined);
      return status;
    },
  };
}
