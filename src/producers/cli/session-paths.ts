import { homedir } from 'node:os';
import { isAbsolute, resolve } from 'node:path';
import { isPlainObject, type PlainObject } from '../../shared/plain-object.js';

/**
 * The session settings that name a file or directory. A session runs in the pods, whose working
 * directory is not the user's: a relative path typed at `orq submit` would be looked up there.
 */
export const SESSION_PATH_SETTINGS = [
  ['llm', 'scenario'],
  ['llm', 'record', 'path'],
  ['planning', 'history', 'directory'],
  ['execution', 'workspaceRoot'],
  ['execution', 'command', 'repository'],
] as const;

/**
 * `overrides` with each relative path among SESSION_PATH_SETTINGS made absolute against `cwd`
 * (where the user typed it), and a leading `~/` as the home directory. Settings left out keep the pods' defaults; other values, and
 * values of the wrong type (validation reports them), are left as they are.
 */
export function resolveSessionPaths(overrides: PlainObject, cwd: string): PlainObject {
  let result = overrides;
  for (const path of SESSION_PATH_SETTINGS) {
    const value = valueAt(result, path);
    if (typeof value === 'string' && value !== '') {
      // A shell expands ~ only outside quotes, and a path in JSON or YAML is always quoted.
      const expanded = value === '~' || value.startsWith('~/') ? homedir() + value.slice(1) : value;
      if (expanded !== value || !isAbsolute(value)) {
        result = withValueAt(result, path, resolve(cwd, expanded));
      }
    }
  }
  return result;
}

function valueAt(object: PlainObject, path: readonly string[]): unknown {
  let current: unknown = object;
  for (const key of path) {
    if (!isPlainObject(current) || !Object.hasOwn(current, key)) return undefined;
    current = current[key];
  }
  return current;
}

/** A copy of `object` with `value` at `path`, whose parents are known to be objects. */
function withValueAt(object: PlainObject, path: readonly string[], value: unknown): PlainObject {
  const [key, ...rest] = path;
  if (key === undefined) return object;
  const next = rest.length === 0 ? value : withValueAt(object[key] as PlainObject, rest, value);
  return { ...object, [key]: next };
}
