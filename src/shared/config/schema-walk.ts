import { z } from 'zod';

/** Wrappers that leave the setting's own schema inside them. */
const WRAPPERS = new Set(['default', 'prefault', 'optional', 'nullable']);

/** The wrapped schema, or undefined when `schema` is not a wrapper. */
function innerOf(schema: z.core.$ZodType): z.core.$ZodType | undefined {
  const def = schema._zod.def;
  return WRAPPERS.has(def.type)
    ? (def as unknown as { innerType: z.core.$ZodType }).innerType
    : undefined;
}

/** The schema under its defaults and optional/nullable wrappers. */
export function unwrapSchema(schema: z.core.$ZodType): z.core.$ZodType {
  let current = schema;
  for (let inner = innerOf(current); inner; inner = innerOf(current)) current = inner;
  return current;
}

/** `schema`, or one of the wrappers' layers inside it, is in `registry`. */
function isMarked(schema: z.core.$ZodType, registry: z.core.$ZodRegistry): boolean {
  for (let current: z.core.$ZodType | undefined = schema; current; current = innerOf(current)) {
    if (registry.has(current)) return true;
  }
  return false;
}

/**
 * The paths of the settings under `root` whose schema is in `registry`, in the schema's key
 * order. The mark may be on any layer of a setting's wrappers (`.optional()`, `.default()`).
 */
export function markedSettings(
  root: z.core.$ZodType,
  registry: z.core.$ZodRegistry,
  parent: readonly string[] = [],
): string[][] {
  const object = unwrapSchema(root);
  if (!(object instanceof z.ZodObject)) return [];
  return Object.entries(object.shape).flatMap(([key, value]) => {
    const path = [...parent, key];
    return isMarked(value, registry) ? [path] : markedSettings(value, registry, path);
  });
}
