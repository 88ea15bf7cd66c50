import { mkdir, realpath } from 'node:fs/promises';
import { resolve } from 'node:path';
import { distinctName } from './distinct-name.js';

/** A path segment from an id; ids may be `.` or `..` by their regex, which must not climb. */
function segment(id: string): string {
  return distinctName(id, /^\.+$/.test(id) ? id.replace(/\./g, '_') : id);
}

/** `<workspaceRoot>/<sessionId>/<taskId>`, resolved against the pod's working directory. */
export function taskWorkspacePath(
  workspaceRoot: string,
  sessionId: string,
  taskId: string,
): string {
  return resolve(workspaceRoot, segment(sessionId), segment(taskId));
}

/** Creates the task's workspace and returns its real path (symlinks in the root resolved). */
export async function ensureTaskWorkspace(
  workspaceRoot: string,
  sessionId: string,
  taskId: string,
): Promise<string> {
  const path = taskWorkspacePath(workspaceRoot, sessionId, taskId);
  await mkdir(path, { recursive: true });
  return realpath(path);
}
