import { describe, it, expect } from 'vitest';
import {
  DEFAULT_MAX_REQUIRED_TERMS,
  extractRequiredTerms,
  validateTermPreservation,
} from '../../src/shared/rules/terms.js';
import type { RequiredTerms } from '../../src/shared/domain/refinement.js';

const required = (...terms: string[]): RequiredTerms => ({ terms, source: 'user-input' });

describe('extractRequiredTerms', () => {
  describe('seed 002 example', () => {
    it('extracts 認証 and バリデーション from 認証機能とバリデーションを実装して', () => {
      const { terms } = extractRequiredTerms('認証機能とバリデーションを実装して');
      expect(terms).toContain('認証');
      expect(terms).toContain('バリデーション');
    });

    it('yields exactly those two terms, dropping 機能, 実装 and the particles', () => {
      expect(extractRequiredTerms('認証機能とバリデーションを実装して').terms).toEqual([
        '認証',
        'バリデーション',
      ]);
    });

    it('marks the terms as coming from the user input', () => {
      expect(extractRequiredTerms('認証機能とバリデーションを実装して').source).toBe('user-input');
    });
  });

  describe('tokenisation', () => {
    it("extracts English terms in the user's spelling, technical terms first", () => {
      expect(
        extractRequiredTerms('Implement JWT authentication and input validation for the REST API')
          .terms,
      ).toEqual(['JWT', 'authentication', 'validation', 'REST', 'API', 'input']);
    });

    it('splits mixed Japanese and English text', () => {
      expect(extractRequiredTerms('JWTで認証を実装').terms).toEqual(['JWT', '認証']);
    });

    it('returns no terms for an empty input', () => {
      expect(extractRequiredTerms('').terms).toEqual([]);
    });

    it('returns no terms for whitespace only', () => {
      expect(extractRequiredTerms(' \n\t\u3000 ').terms).toEqual([]);
    });

    it('returns no terms for punctuation only', () => {
      expect(extractRequiredTerms('!!! ... ？！、。・「」').terms).toEqual([]);
    });

    it('drops single-character tokens', () => {
      expect(extractRequiredTerms('x y z を 作って').terms).toEqual([]);
    });

    it('drops tokens without a letter, such as numbers', () => {
      expect(extractRequiredTerms('Upgrade to version 2 in 2026, 3.14').terms).toEqual([
        'Upgrade',
        'version',
      ]);
    });

    it('drops pure-hiragana words (particles, auxiliaries, inflections)', () => {
      expect(extractRequiredTerms('キャッシュをできるようにしてください').terms).toEqual([
        'キャッシュ',
      ]);
    });

    it('drops English function words and generic request verbs', () => {
      expect(
        extractRequiredTerms('Please implement, add, create, make and build the new feature').terms,
      ).toEqual([]);
    });

    it('drops generic Japanese verbal and abstract nouns', () => {
      expect(extractRequiredTerms('機能の実装、追加、作成、修正に対応する').terms).toEqual([]);
    });

    it('keeps domain verbal nouns such as 登録 and 削除', () => {
      expect(extractRequiredTerms('ユーザー登録と削除を実装').terms).toEqual([
        'ユーザー',
        '登録',
        '削除',
      ]);
    });

    it('joins a katakana loanword the segmenter splits (マイグレーション)', () => {
      expect(extractRequiredTerms('データベースのマイグレーションを作成する').terms).toEqual([
        'データベース',
        'マイグレーション',
      ]);
    });

    it('does not join katakana words separated by a middle dot', () => {
      expect(extractRequiredTerms('セキュリティ・レビュー').terms).toEqual([
        'セキュリティ',
        'レビュー',
      ]);
    });

    it('folds full-width Latin and half-width katakana to their usual forms', () => {
      expect(extractRequiredTerms('ＪＷＴ認証とﾊﾞﾘﾃﾞｰｼｮﾝ').terms).toEqual([
        'JWT',
        '認証',
        'バリデーション',
      ]);
    });
  });

  describe('deduplication and priority', () => {
    it('keeps the first occurrence of a repeated term', () => {
      expect(extractRequiredTerms('キャッシュとログとキャッシュ').terms).toEqual([
        'キャッシュ',
        'ログ',
      ]);
    });

    it('treats terms differing only in case as one, spelled as they first appear', () => {
      expect(extractRequiredTerms('Cache the session and the CACHE keys').terms).toEqual([
        'Cache',
        'session',
        'keys',
      ]);
    });

    it('moves technical terms to the front and keeps input order among equals', () => {
      expect(extractRequiredTerms('logging, metrics, OAuth, tracing and GraphQL').terms).toEqual([
        'OAuth',
        'GraphQL',
        'logging',
        'metrics',
        'tracing',
      ]);
    });
  });

  describe('top-N cut', () => {
    const twelveWords = 'alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima';

    it('keeps at most 10 terms by default', () => {
      const { terms } = extractRequiredTerms(twelveWords);
      expect(DEFAULT_MAX_REQUIRED_TERMS).toBe(10);
      expect(terms).toHaveLength(10);
      expect(terms.at(-1)).toBe('juliet');
    });

    it('honours maxTerms', () => {
      expect(extractRequiredTerms(twelveWords, { maxTerms: 3 }).terms).toEqual([
        'alpha',
        'bravo',
        'charlie',
      ]);
    });

    it('keeps a late technical term when the cut removes others', () => {
      const { terms } = extractRequiredTerms(`${twelveWords} sql`);
      expect(terms[0]).toBe('sql');
      expect(terms).toHaveLength(10);
    });

    it('returns no extracted terms with maxTerms 0', () => {
      expect(extractRequiredTerms('JWTで認証を実装', { maxTerms: 0 }).terms).toEqual([]);
    });

    it('rejects a negative maxTerms', () => {
      expect(() => extractRequiredTerms('x', { maxTerms: -1 })).toThrow(RangeError);
    });

    it('rejects a fractional maxTerms', () => {
      expect(() => extractRequiredTerms('x', { maxTerms: 2.5 })).toThrow(RangeError);
    });
  });

  describe('custom terms', () => {
    it('puts custom terms first, as given', () => {
      expect(extractRequiredTerms('JWTで認証を実装', { customTerms: ['監査ログ'] }).terms).toEqual([
        '監査ログ',
        'JWT',
        '認証',
      ]);
    });

    it('never cuts custom terms, even beyond maxTerms', () => {
      expect(
        extractRequiredTerms('JWTで認証を実装', { customTerms: ['A1', 'B2', 'C3'], maxTerms: 2 })
          .terms,
      ).toEqual(['A1', 'B2', 'C3']);
    });

    it('counts custom terms against maxTerms', () => {
      expect(
        extractRequiredTerms('JWTで認証を実装', { customTerms: ['監査ログ'], maxTerms: 2 }).terms,
      ).toEqual(['監査ログ', 'JWT']);
    });

    it('drops an extracted term that repeats a custom one', () => {
      expect(extractRequiredTerms('JWTで認証を実装', { customTerms: ['JWT'] }).terms).toEqual([
        'JWT',
        '認証',
      ]);
    });

    it('trims custom terms and ignores empty ones', () => {
      expect(extractRequiredTerms('', { customTerms: ['  監査 ', '', '   '] }).terms).toEqual([
        '監査',
      ]);
    });
  });
});

describe('validateTermPreservation', () => {
  const seedTasks = [
    { acceptance: 'JWT認証を実装する', context: '' },
    { acceptance: '入力バリデーションを追加する', context: '' },
  ];

  it('finds both seed 002 terms in the seed tasks: rate 1.0, nothing missing', () => {
    const result = validateTermPreservation(required('認証', 'バリデーション'), seedTasks);
    expect(result.preservationRate).toBe(1);
    expect(result.missing).toHaveLength(0);
    expect(result.preserved).toEqual(['認証', 'バリデーション']);
  });

  it("detects the seed's replan that loses 認証 and バリデーション", () => {
    const replanned = [{ acceptance: 'ユーザー管理機能の実装' }, { acceptance: 'API実装' }];
    const result = validateTermPreservation(required('認証', 'バリデーション'), replanned);
    expect(result.missing).toEqual(['認証', 'バリデーション']);
    expect(result.preserved).toEqual([]);
    expect(result.preservationRate).toBe(0);
  });

  it('gives rate 1 (not NaN) for an empty term list', () => {
    expect(validateTermPreservation(required(), seedTasks)).toEqual({
      preserved: [],
      missing: [],
      preservationRate: 1,
    });
  });

  it('gives rate 1 for an empty term list even with no tasks', () => {
    expect(validateTermPreservation(required(), []).preservationRate).toBe(1);
  });

  it('gives rate 0 when there are terms but no tasks', () => {
    expect(validateTermPreservation(required('認証'), []).preservationRate).toBe(0);
  });

  it('reports a partial loss with its rate, in term order', () => {
    const result = validateTermPreservation(required('認証', 'ログ', 'バリデーション'), seedTasks);
    expect(result.preserved).toEqual(['認証', 'バリデーション']);
    expect(result.missing).toEqual(['ログ']);
    expect(result.preservationRate).toBeCloseTo(2 / 3);
  });

  it('matches case-insensitively', () => {
    const result = validateTermPreservation(required('jwt', 'OAUTH'), [
      { acceptance: 'Issue a JWT', context: 'via oauth' },
    ]);
    expect(result.missing).toEqual([]);
  });

  it('matches a substring inside a longer word', () => {
    const result = validateTermPreservation(required('valid'), [
      { acceptance: 'input validation' },
    ]);
    expect(result.preserved).toEqual(['valid']);
  });

  it('reads the context', () => {
    const result = validateTermPreservation(required('認証'), [
      { acceptance: 'ログイン画面', context: '認証はJWTで行う' },
    ]);
    expect(result.preserved).toEqual(['認証']);
  });

  it('reads the title', () => {
    const result = validateTermPreservation(required('認証'), [
      { title: '認証基盤', acceptance: 'トークンを発行できる' },
    ]);
    expect(result.preserved).toEqual(['認証']);
  });

  it('does not find a term spread across two fields', () => {
    const result = validateTermPreservation(required('foobar'), [
      { title: 'foo', acceptance: 'bar' },
    ]);
    expect(result.missing).toEqual(['foobar']);
  });

  it('matches full-width text against a half-width term', () => {
    const result = validateTermPreservation(required('jwt'), [{ acceptance: 'ＪＷＴを検証する' }]);
    expect(result.preserved).toEqual(['jwt']);
  });

  it('also checks config.customRequiredTerms', () => {
    const result = validateTermPreservation(required('認証'), seedTasks, {
      customRequiredTerms: ['監査ログ'],
    });
    expect(result.preserved).toEqual(['認証']);
    expect(result.missing).toEqual(['監査ログ']);
    expect(result.preservationRate).toBe(0.5);
  });

  it('counts a custom term that repeats a required one only once', () => {
    const result = validateTermPreservation(required('JWT'), seedTasks, {
      customRequiredTerms: ['jwt'],
    });
    expect(result.preserved).toEqual(['JWT']);
    expect(result.preservationRate).toBe(1);
  });
});
