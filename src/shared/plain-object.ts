/** A JSON-like object: what a parsed config or request body holds at each level. */
export type PlainObject = Record<string, unknown>;

/** An object literal (not an array, class instance or null). */
export function isPlainObject(value: unknown): value is PlainObject {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return false;
  const proto = Object.getPrototypeOf(value) as unknown;
  return proto === Object.prototype || proto === null;
}

/** The value at `path` (keys from the top), undefined where a level is not an object. */
export function valueAtPath(target: unknown, path: readonly string[]): unknown {
  let node = target;
  for (const segment of path) {
    if (!isPlainObject(node)) return undefined;
    node = node[segment];
  }
  return node;
}

/** Sets `value` at `path` in `target`, making (or replacing) objects along the way. Mutates. */
export function setValueAtPath(target: PlainObject, path: readonly string[], value: unknown): void {
  let node = target;
  for (const segment of path.slice(0, -1)) {
    if (!isPlainObject(node[segment])) node[segment] = {};
    node = node[segment] as PlainObject;
  }
  node[path[path.length - 1]!] = value;
}
