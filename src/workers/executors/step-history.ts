import { appendFile, mkdir } from 'node:fs/promises';
import { dirname, resolve } from 'node:path';
import type { ProgressUpdate } from '../../shared/domain/progress.js';
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

/**
 * `history` that also reports each newly recorded step as the execution's progress (the step
 * is recorded already; the report is best effort).
 */
export function reportingProgress(
  history: StepHistory,
  report: (update: ProgressUpdate) => void,
): StepHistory {
  return {
    load: () => history.load(),
    async append(step, entry, plan) {
      const status = await history.append(step, entry, plan);
      const tool = entry.type === 'action' ? entry.tool : undefined;
      report({
        activity: `step ${step}: ${entry.type}${tool ? ` ${tool}` : ''}`,
        step,
        type: entry.type,
        ...(tool ? { tool } : {}),
      });
      return status;
    },
  };
}
