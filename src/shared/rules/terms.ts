import type { RefinementConfig } from '../config/schema.js';
import type { RequiredTerms, TermPreservationResult } from '../domain/refinement.js';

/**
 * Required-term extraction and preservation (seed 002). Pure: data in, data out.
 *
 * Seed 002's Phase 1 splits on whitespace and punctuation, which cannot split Japanese (its own
 * example 「認証機能とバリデーションを実装して」 has no spaces). DESIGN.md therefore tokenises with
 * `Intl.Segmenter` (ICU's dictionary-based word breaker, built into Node) and keeps the seed's
 * other rules: tokens of at least 2 characters, stop words removed, technical terms first, top 10.
 */

/** The fields of a task whose text counts for preservation; PlannedTask and Task both fit. */
export interface TaskText {
  acceptance: string;
  context?: string;
  title?: string;
}

export interface ExtractRequiredTermsOptions {
  /** Terms the user asks to keep whatever the extraction finds; always first, never cut. */
  customTerms?: readonly string[];
  /** Upper bound on the number of terms returned, custom terms included (default 10). */
  maxTerms?: number;
}

/** Seed 002: "上位10個". */
export const DEFAULT_MAX_REQUIRED_TERMS = 10;

/** Seed 002's minimum token length, in characters (code points). */
const MIN_TERM_LENGTH = 2;

/** Seed 002's technical-term pattern: matching tokens move to the front, in input order. */
export const TECH_TERM_PATTERN = /^(api|jwt|oauth|sql|http|crud|rest|graphql|auth|valid|test)/i;

/**
 * Japanese words that frame a request rather than name what it is about: generic verbal nouns
 * (実装 "implement", 追加 "add", 作成 "create", ...), verbs the segmenter keeps whole (行う, 書く)
 * and abstract nouns (機能 "feature", 処理 "processing", 場合 "case", ...). Verbal nouns that can
 * name a domain operation (登録, 削除, 更新, 検索, 認証, ...) are deliberately not here.
 * Pure-hiragana tokens (particles, auxiliaries, inflections: を, して, ください) never reach this
 * list: they are dropped by rule in `isCandidateTerm`.
 */
export const JAPANESE_STOP_WORDS: ReadonlySet<string> = new Set([
  // generic verbal nouns: "do / make / add / change something"
  '実装',
  '作成',
  '追加',
  '対応',
  '修正',
  '変更',
  '実行',
  '使用',
  '利用',
  '確認',
  '開発',
  '構築',
  '導入',
  '改善',
  '検討',
  '作業',
  '実現',
  '用意',
  '準備',
  '整備',
  '記述',
  // verbs and politeness the segmenter keeps as one token
  '行う',
  '書く',
  '作る',
  '使う',
  'お願い',
  // abstract nouns
  '機能',
  '処理',
  '部分',
  '全体',
  '全て',
  '全部',
  '場合',
  '方法',
  '内容',
  '必要',
  '可能',
  '対象',
  '以下',
  '以上',
  '以外',
  '程度',
  '一部',
  '今回',
  '各種',
  '複数',
  '適切',
  '簡単',
]);

/**
 * English function words and the generic verbs and nouns of a request ("please implement the
 * feature", "add", "create", "make", "build", "write"). Compared after lowercasing.
 */
export const ENGLISH_STOP_WORDS: ReadonlySet<string> = new Set([
  // articles, conjunctions, prepositions
  'the',
  'an',
  'and',
  'or',
  'but',
  'nor',
  'of',
  'for',
  'to',
  'in',
  'on',
  'at',
  'by',
  'with',
  'without',
  'from',
  'into',
  'onto',
  'as',
  'via',
  'per',
  'about',
  'than',
  'then',
  'so',
  'if',
  'else',
  'not',
  'no',
  // pronouns and determiners
  'it',
  'its',
  'this',
  'that',
  'these',
  'those',
  'there',
  'here',
  'me',
  'my',
  'we',
  'us',
  'our',
  'you',
  'your',
  'he',
  'she',
  'they',
  'them',
  'their',
  'all',
  'any',
  'some',
  'each',
  'every',
  'both',
  'other',
  'such',
  // auxiliaries
  'is',
  'are',
  'was',
  'were',
  'be',
  'been',
  'being',
  'am',
  'do',
  'does',
  'did',
  'done',
  'have',
  'has',
  'had',
  'can',
  'could',
  'should',
  'would',
  'will',
  'shall',
  'may',
  'might',
  'must',
  // adverbs and fillers
  'also',
  'just',
  'only',
  'very',
  'too',
  'more',
  'most',
  'please',
  'etc',
  // generic verbs of a request
  'implement',
  'implements',
  'implemented',
  'implementing',
  'implementation',
  'add',
  'adds',
  'added',
  'adding',
  'create',
  'creates',
  'created',
  'creating',
  'make',
  'makes',
  'made',
  'making',
  'build',
  'builds',
  'built',
  'building',
  'write',
  'writes',
  'wrote',
  'written',
  'writing',
  'use',
  'uses',
  'used',
  'using',
  'need',
  'needs',
  'want',
  'wants',
  'ensure',
  'support',
  'supports',
  'allow',
  'allows',
  'let',
  'get',
  'fix',
  'fixes',
  'fixed',
  'fixing',
  // generic nouns of a request
  'feature',
  'features',
  'function',
  'functionality',
  'task',
  'tasks',
  'thing',
  'things',
  'way',
  'new',
]);

const segmenter = new Intl.Segmenter('ja', { granularity: 'word' });

const KATAKANA_RUN = /^[\p{Script_Extensions=Katakana}]+$/u;
const HIRAGANA_ONLY = /^[\p{Script=Hiragana}ー]+$/u;
const HAS_LETTER = /\p{L}/u;

/**
 * Both sides of every comparison go through this: NFKC folds full-width Latin (ＪＷＴ) and
 * half-width katakana (ﾊﾞﾘﾃﾞｰｼｮﾝ) into their usual forms, then case is ignored.
 */
function normalizeForMatch(text: string): string {
  return text.normalize('NFKC').toLowerCase();
}

/**
 * Word-like segments of the text, with adjacent katakana segments joined again. ICU's dictionary
 * splits katakana loanwords it does not know (マイグレーション → マイ/グレー/ション); a contiguous
 * katakana run is one word, as character-class tokenisers of Japanese treat it.
 */
function segmentWords(text: string): string[] {
  const words: string[] = [];
  let previousEnd = -1;
  let previousIsKatakana = false;
  for (const { segment, index, isWordLike } of segmenter.segment(text)) {
    if (!isWordLike) {
      previousIsKatakana = false;
      continue;
    }
    const isKatakana = KATAKANA_RUN.test(segment);
    if (isKatakana && previousIsKatakana && index === previousEnd && words.length > 0) {
      words[words.length - 1] += segment;
    } else {
      words.push(segment);
    }
    previousEnd = index + segment.length;
    previousIsKatakana = isKatakana;
  }
  return words;
}

/** Seed 002's filters: long enough, has a letter, not a stop word, not a hiragana-only word. */
function isCandidateTerm(token: string): boolean {
  if ([...token].length < MIN_TERM_LENGTH) return false;
  if (!HAS_LETTER.test(token)) return false; // numbers such as 3.14 or 2026
  // Hiragana-only words are particles, auxiliaries and inflections (を, して, ください, できる);
  // the domain nouns of a technical request are written in kanji, katakana or Latin letters.
  if (HIRAGANA_ONLY.test(token)) return false;
  return !JAPANESE_STOP_WORDS.has(token) && !ENGLISH_STOP_WORDS.has(token.toLowerCase());
}

/** Trimmed, non-empty, first occurrence of each term (compared case- and width-insensitively). */
function dedupeTerms(terms: readonly string[]): string[] {
  const seen = new Set<string>();
  const result: string[] = [];
  for (const raw of terms) {
    const term = raw.trim();
    if (term === '') continue;
    const key = normalizeForMatch(term);
    if (seen.has(key)) continue;
    seen.add(key);
    result.push(term);
  }
  return result;
}

/**
 * Seed 002 Phase 1: the terms of the user's instruction that every replan must keep.
 *
 * Tokens keep the user's spelling (JWT stays JWT in prompts and in what orq shows; only NFKC
 * folds full-width and half-width forms), are deduplicated ignoring case keeping the first
 * occurrence, technical terms are moved to the front by a stable sort (ties keep input order),
 * and the list is cut to `maxTerms`. Preservation ignores case, so the spelling changes no
 * verdict. Custom terms come first, as given, and are never cut: with more custom terms than
 * `maxTerms`, only the custom terms are returned.
 */
export function extractRequiredTerms(
  userInput: string,
  options: ExtractRequiredTermsOptions = {},
): RequiredTerms {
  const maxTerms = options.maxTerms ?? DEFAULT_MAX_REQUIRED_TERMS;
  if (!Number.isInteger(maxTerms) || maxTerms < 0) {
    throw new RangeError(`maxTerms must be a non-negative integer, got ${String(maxTerms)}`);
  }
  const customTerms = dedupeTerms(options.customTerms ?? []);
  const customKeys = new Set(customTerms.map(normalizeForMatch));

  const extracted = dedupeTerms(
    segmentWords(userInput.normalize('NFKC')).filter(isCandidateTerm),
  ).filter((term) => !customKeys.has(normalizeForMatch(term)));

  // Array.prototype.sort is stable (ES2019), so ties keep their input order.
  const prioritized = extracted.sort(
    (a, b) => Number(!TECH_TERM_PATTERN.test(a)) - Number(!TECH_TERM_PATTERN.test(b)),
  );
  const room = Math.max(0, maxTerms - customTerms.length);
  return { terms: [...customTerms, ...prioritized.slice(0, room)], source: 'user-input' };
}

/**
 * Seed 002: which required terms still appear in the tasks. A term is preserved when it occurs,
 * ignoring case and character width, as a substring of any task's title, acceptance or context
 * (the seed reads acceptance and context; the title names the task too, so it counts).
 *
 * The terms checked are `requiredTerms.terms` plus `config.customRequiredTerms`, deduplicated.
 * With no terms at all nothing can be lost: the rate is 1, not 0/0.
 */
export function validateTermPreservation(
  requiredTerms: RequiredTerms,
  tasks: readonly TaskText[],
  config: Partial<Pick<RefinementConfig, 'customRequiredTerms'>> = {},
): TermPreservationResult {
  const terms = dedupeTerms([...requiredTerms.terms, ...(config.customRequiredTerms ?? [])]);
  // A newline between fields so that no term is "found" across the end of one and the start
  // of the next.
  const taskText = normalizeForMatch(
    tasks.map((t) => [t.title ?? '', t.acceptance, t.context ?? ''].join('\n')).join('\n'),
  );

  const preserved: string[] = [];
  const missing: string[] = [];
  for (const term of terms) {
    (taskText.includes(normalizeForMatch(term)) ? preserved : missing).push(term);
  }
  return {
    preserved,
    missing,
    preservationRate: terms.length === 0 ? 1 : preserved.length / terms.length,
  };
}
