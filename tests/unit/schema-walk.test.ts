import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { markedSettings, unwrapSchema } from '../../src/shared/config/schema-walk.js';

describe('markedSettings', () => {
  it('finds marks at any depth and on any layer of a setting’s wrappers, in key order', () => {
    const marks = z.registry<{ note: string }>();
    const mark = <T extends z.core.$ZodType>(schema: T): T => {
      marks.add(schema, { note: 'x' });
      return schema;
    };
    const inner = mark(z.string());
    const schema = z.object({
      outer: mark(z.string().optional()),
      plain: z.string(),
      section: z
        .object({
          deep: z.object({ wrapped: inner.default('d').optional() }).optional(),
          number: z.number(),
        })
        .prefault({ number: 1 }),
      list: z.array(mark(z.string())),
    });
    expect(markedSettings(schema, marks)).toEqual([['outer'], ['section', 'deep', 'wrapped']]);
    expect(markedSettings(z.string(), marks)).toEqual([]);
    expect(markedSettings(schema, z.registry<{ note: string }>())).toEqual([]);
  });
});

describe('unwrapSchema', () => {
  it('peels defaults, prefaults, optional and nullable layers, and nothing else', () => {
    const core = z.object({ a: z.string() });
    expect(unwrapSchema(core.prefault({ a: 'x' }).optional().nullable())).toBe(core);
    const array = z.array(z.string());
    expect(unwrapSchema(array.default([]))).toBe(array);
    expect(unwrapSchema(array)).toBe(array);
  });
});
