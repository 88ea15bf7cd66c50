import { describe, expect, it } from 'vitest';
import type { SessionResult } from '../../src/shared/domain/result.js';
import { formatResultSection, resultNotices } from '../../src/producers/cli/result-text.js';

const result = (fields: Partial<SessionResult>): SessionResult => ({
  sessionId: 's1',
  state: 'COMPLETED',
  selection: 'final',
  complete: true,
  outputs: [],
  missing: [],
  notes: [],
  text: '',
  textTruncated: false,
  ranByBuiltin: false,
  builtinRoles: [],
  ...fields,
});

describe('the result as orq run ends with it', () => {
  it('is the text under a heading when the result is complete', () => {
    expect(formatResultSection(result({ text: 'the answer\n\n' }))).toBe('result:\nthe answer');
  });

  it('says it is partial, with its notes before the text', () => {
    const partial = result({ complete: false, notes: ['one', 'two'], text: 'so far' });
    expect(formatResultSection(partial)).toBe('result (partial):\nnote: one\nnote: two\n\nso far');
  });

  it('says first that no model made it when the builtin provider did', () => {
    const builtin = result({
      text: 'Done: login',
      builtinRoles: ['planner', 'judge', 'worker', 'replanner'],
    });
    expect(formatResultSection({ ...builtin, ranByBuiltin: true })).toBe(
      'result:\nnote: No model ran this session: the builtin provider (a rule set, not an LLM) planned, judged and executed it. See docs/providers.md to use a model.\n\nDone: login',
    );
  });

  it('says when there is no output at all', () => {
    expect(formatResultSection(result({ complete: false, notes: ['n'] }))).toBe(
      'result (partial):\nnote: n\n\n(no output)',
    );
  });
});

describe("orq result's notices", () => {
  it('are one orq: line per note, and nothing for a complete result', () => {
    expect(resultNotices(result({ notes: ['a', 'b'] }))).toBe('orq: a\norq: b\n');
    expect(resultNotices(result({}))).toBe('');
  });

  it('say on stderr that no model made a result the builtin provider made, complete or not', () => {
    expect(
      resultNotices(result({ ranByBuiltin: true, builtinRoles: ['worker'], notes: ['a'] })),
    ).toBe(
      'orq: The builtin provider (a rule set, not an LLM) played the worker of this session, not a model.\norq: a\n',
    );
  });
});
