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
});
