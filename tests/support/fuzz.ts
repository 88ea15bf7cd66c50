import fc from 'fast-check';
import type { ZodType } from 'zod';

type Path = (string | number)[];

/** Every path into a JSON value: object keys and array indexes at any depth. */
export function pathsOf(value: unknown, prefix: Path = []): Path[] {
  if (Array.isArray(value))
    return value.flatMap((v, i) => [[...prefix, i], ...pathsOf(v, [...prefix, i])]);
  if (value !== null && typeof value === 'object')
    return Object.entries(value).flatMap(([k, v]) => [
      [...prefix, k],
      ...pathsOf(v, [...prefix, k]),
    ]);
  return [];
}

/** A copy of `value` with the node at `path` replaced, or removed when `replacement` is undefined. */
export function withAt(value: unknown, path: Path, replacement: unknown): unknown {
  const copy = structuredClone(value) as Record<string | number, unknown>;
  let node = copy;
  for (const key of path.slice(0, -1)) node = node[key] as Record<string | number, unknown>;
  const last = path[path.length - 1] as string | number;
  if (replacement === undefined) {
    if (Array.isArray(node)) node.splice(last as number, 1);
    else delete node[last];
  } else node[last] = replacement;
  return copy;
}

/**
 * Up to `count` samples of `arb` that `schema` refuses. Drawn then filtered (not fc's filter,
 * which loops for ever on a schema that accepts nearly everything the arbitrary makes).
 */
function refused(arb: fc.Arbitrary<unknown>, schema: ZodType, count: number, seed: number) {
  return fc
    .sample(arb, { numRuns: count * 20, seed })
    .filter((payload) => !schema.safeParse(payload).success)
    .slice(0, count);
}

/**
 * Payloads one change away from a valid one, that its schema refuses: a field (at any depth,
 * except those in `keep`) dropped or replaced by an arbitrary JSON value.
 */
export function nearMisses(
  valid: unknown,
  schema: ZodType,
  options: { count: number; seed: number; keep?: string[] },
): unknown[] {
  const keep = new Set(options.keep ?? []);
  const paths = pathsOf(valid).filter((p) => !keep.has(String(p[0])));
  const change = fc
    .tuple(fc.constantFrom(...paths), fc.option(fc.jsonValue(), { nil: undefined, freq: 3 }))
    .map(([path, replacement]) => withAt(valid, path, replacement));
  return refused(change, schema, options.count, options.seed);
}

/** Arbitrary JSON values the schema refuses. */
export function garbage(schema: ZodType, options: { count: number; seed: number }): unknown[] {
  return refused(fc.jsonValue(), schema, options.count, options.seed);
}

/**
 * Objects with the keys of `valid`, each absent or any JSON value, but with the fields of
 * `fixed` (e.g. a known session id), that the schema refuses.
 */
export function garbageWith(
  valid: Record<string, unknown>,
  fixed: Record<string, unknown>,
  schema: ZodType,
  options: { count: number; seed: number },
): unknown[] {
  const model = Object.fromEntries(Object.keys(valid).map((k) => [k, fc.jsonValue()]));
  const arb = fc
    .tuple(
      fc.record(model, { requiredKeys: [] }),
      fc.dictionary(fc.string(), fc.jsonValue(), { maxKeys: 2 }),
    )
    .map(([fields, extra]) => ({ ...extra, ...fields, ...fixed }));
  return refused(arb, schema, options.count, options.seed);
}
