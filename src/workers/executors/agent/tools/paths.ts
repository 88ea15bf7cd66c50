import { lstat, realpath } from 'node:fs/promises';
import { dirname, isAbsolute, relative, resolve, sep } from 'node:path';
import { ToolError } from './types.js';

/** True when `path` is `root` or below it (both absolute and normalised). */
export function isWithin(root: string, path: string): boolean {
  return path === root || path.startsWith(root.endsWith(sep) ? root : `${root}${sep}`);
}

async function exists(path: string): Promise<boolean> {
  try {
    await lstat(path);
    return true;
  } catch {
    return false;
  }
}

/**
 * Resolves a path the model gave against the workspace and refuses any that leads outside it:
 * an absolute path elsewhere, a `..` climb, or a symlink (anywhere along the path, or a dangling
 * one at its end) whose target is outside. `root` must be a real path (see ensureTaskWorkspace).
 * Returns the absolute path inside the workspace.
 */
export async function resolveInWorkspace(root: string, requested: unknown): Promise<string> {
  if (typeof requested !== 'string' || requested.trim() === '') {
    throw new ToolError('path must be a non-empty string');
  }
  if (requested.includes('\0')) throw new ToolError('path must not contain NUL bytes');
  const absolute = resolve(root, requested);
  if (!isWithin(root, absolute)) {
    throw new ToolError(
      `path "${requested}" is outside the workspace; ${isAbsolute(requested) ? 'absolute paths must lie inside it' : 'it must not climb out with ..'}`,
    );
  }
  // The deepest part of the path that exists decides where it really leads.
  let existing = absolute;
  while (!(await exists(existing))) existing = dirname(existing);
  let real: string;
  try {
    real = await realpath(existing);
  } catch {
    throw new ToolError(`path "${requested}" is a symlink whose target does not exist`);
  }
  if (!isWithin(root, real)) {
    throw new ToolError(`path "${requested}" leads outside the workspace through a symlink`);
  }
  return absolute;
}

/** The workspace-relative form of an absolute path inside it, `.` for the root. */
export function workspaceRelative(root: string, absolute: string): string {
  return relative(root, absolute) || '.';
}
