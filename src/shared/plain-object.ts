/** A JSON-like object: what a parsed config or request body holds at each level. */
export type PlainObject = Record<string, unknown>;

/** An object literal (not an array, class instance or null). */
export function isPlainObject(value: unknown): value is PlainObject {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return false;
  const proto = Object.getPrototypeOf(value) as unknown;
  return proto === Object.prototype || proto === null;
}
