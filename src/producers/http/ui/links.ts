import { UI_PATH } from './html.js';

const SAFE_ID = /^[A-Za-z0-9_.-]+$/;

/**
 * The session view's page for a job's payload: the task's page when the job names a task, else
 * the session's; undefined for a payload that names no session. Bull Board shows it beside the
 * job's data (as `orqView`), the way back from a job to the task.
 */
export function viewPathOfJob(data: unknown): string | undefined {
  if (typeof data !== 'object' || data === null) return undefined;
  const { sessionId, taskId } = data as { sessionId?: unknown; taskId?: unknown };
  if (typeof sessionId !== 'string' || !SAFE_ID.test(sessionId)) return undefined;
  const session = `${UI_PATH}/sessions/${sessionId}`;
  return typeof taskId === 'string' && SAFE_ID.test(taskId)
    ? `${session}/tasks/${encodeURIComponent(taskId)}`
    : session;
}
