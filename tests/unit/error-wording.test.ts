import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  describeZodIssues,
  issueText,
  parseForPeople,
  parseOrThrow,
} from '../../src/shared/errors.js';
import { Instruction } from '../../src/producers/instruction.js';

/** The sentences a refusal of `input` by `schema` says, as every entry point words them. */
function refusal(schema: z.ZodType, input: unknown): string[] {
  const result = parseForPeople(schema, input);
  if (result.success) throw new Error('accepted');
  return describeZodIssues(result.error).map(issueText);
}

const Options = z.strictObject({
  prefix: z.string().optional(),
  limit: z.number().int().min(1).max(500).optional(),
  ratio: z.number().gt(0).optional(),
  tags: z.array(z.string()).min(1).optional(),
  until: z.enum(['settled', 'finished']).optional(),
  nested: z.strictObject({ depth: z.number() }).optional(),
});

describe('the wording of a refused value', () => {
  it('names an unknown key at the top level by itself, not as "(root)"', () => {
    expect(refusal(Options, { prefx: 'a' })).toEqual(['unknown key "prefx" at the top level']);
  });

  it('names an unknown key below the top level by its full path, one issue per key', () => {
    const result = parseForPeople(Options, { nested: { depth: 1, a: 1, b: 2 } });
    expect(result.success).toBe(false);
    expect(describeZodIssues(result.error!)).toEqual([
      { path: 'nested.a', message: 'unknown key "nested.a"' },
      { path: 'nested.b', message: 'unknown key "nested.b"' },
    ]);
  });

  it('says what a field expects and what it got, in words rather than zod\'s "received NaN"', () => {
    expect(refusal(Options, { limit: Number.NaN })).toEqual(['limit: expected a number, got NaN']);
    expect(refusal(Options, { limit: 'abc' })).toEqual(['limit: expected a number, got "abc"']);
    expect(refusal(Options, { limit: 1.5 })).toEqual(['limit: expected a whole number, got 1.5']);
    expect(refusal(Options, { prefix: 3 })).toEqual(['prefix: expected a string, got 3']);
    expect(refusal(Options, 'text')).toEqual(['expected an object, got "text"']);
  });

  it('states a bound with its unit and the value given', () => {
    expect(refusal(Options, { limit: 501 })).toEqual(['limit: at most 500, got 501']);
    expect(refusal(Options, { limit: 0 })).toEqual(['limit: at least 1, got 0']);
    expect(refusal(Options, { ratio: 0 })).toEqual(['ratio: above 0, got 0']);
    expect(refusal(Options, { tags: [] })).toEqual(['tags: at least 1 item, got 0 items']);
    expect(
      refusal(z.object({ instruction: Instruction }), { instruction: 'x'.repeat(100_001) }),
    ).toEqual(['instruction: at most 100,000 characters, got 100,001 characters']);
  });

  it('lists the values a choice allows', () => {
    expect(refusal(Options, { until: 'done' })).toEqual([
      'until: expected one of "settled", "finished", got "done"',
    ]);
  });

  it("keeps a schema's own message", () => {
    expect(refusal(z.object({ instruction: Instruction }), { instruction: ' ' })).toEqual([
      'instruction: instruction must not be empty',
    ]);
  });

  it('words the message of the ValidationError parseOrThrow throws alike', () => {
    expect(() =>
      parseOrThrow(Options, { prefx: 'a', limit: Number.NaN }, 'client options'),
    ).toThrow(
      'Invalid client options: limit: expected a number, got NaN; unknown key "prefx" at the top level',
    );
  });
});
