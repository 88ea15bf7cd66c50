import { homedir } from 'node:os';
import { isAbsolute, resolve } from 'node:path';
import { mergeConfig } from '../../shared/config/load.js';
import { markedSettings } from '../../shared/config/schema-walk.js';
import { pathSettings, SessionConfig } from '../../shared/config/schema.js';
import { setValueAtPath, valueAtPath, type PlainObject } from '../../shared/plain-object.js';

/**
 * The session settings that name a file or directory (marked in the schema). A session runs in
 * the pods, whose working directory is not the user's: a relative path typed at `orq submit`
 * would be looked up there.
 */
export const SESSION_PATH_SETTINGS: readonly (readonly string[])[] = markedSettings(
  SessionConfig,
  pathSettings,
);

/**
 * `overrides` with each relative path among SESSION_PATH_SETTINGS made absolute against `cwd`
 * (where the user typed it), and a leading `~/` read as the home directory. Settings left out
 * keep the pods' defaults; other values, and values of the wrong type (validation reports
 * them), are left as they are. The input is not changed.
 */
export function resolveSessionPaths(overrides: PlainObject, cwd: string): PlainObject {
  const resolved: PlainObject = {};
  for (const path of SESSION_PATH_SETTINGS) {
    const value = valueAtPath(overrides, path);
    if (typeof value !== 'string' || value === '') continue;
    // A shell expands ~ only outside quotes, and a path in JSON or YAML is always quoted.
    const expanded = value === '~' || value.startsWith('~/') ? homedir() + value.slice(1) : value;
    if (expanded !== value || !isAbsolute(value)) {
      setValueAtPath(resolved, path, resolve(cwd, expanded));
    }
  }
  return mergeConfig(overrides, resolved) as PlainObject;
}
