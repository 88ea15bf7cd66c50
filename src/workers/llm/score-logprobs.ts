/**
 * Probability-weighted scores (issue 38, G-Eval's idea): where the server returns the reply's
 * token log-probabilities (OpenAI Chat Completions `logprobs: true, top_logprobs: N`; vLLM and
 * other OpenAI-compatible servers alike), the plan score is the expected value over the score
 * tokens the model weighed, not only the one it wrote. One call, less noise. Pure.
 */

/** One generated token with the alternatives the server reports for its position. */
export interface TokenLogprob {
  token: string;
  logprob: number;
  top: { token: string; logprob: number }[];
}

export interface WeightedScore {
  /** The expected score, to two decimals. */
  score: number;
  /** The score the model wrote. */
  stated: number;
  /** Probability the alternatives that are scores hold together (0–1): what was weighed. */
  mass: number;
}

/** Top log-probabilities to ask for: OpenAI's maximum. */
export const TOP_LOGPROBS = 20;

/** A token that is a whole score by itself, with the spaces a tokenizer glues on. */
function scoreOf(token: string, min: number, max: number): number | undefined {
  const text = token.trim();
  if (!/^\d{1,3}$/.test(text)) return undefined;
  const value = Number(text);
  return value >= min && value <= max ? value : undefined;
}

/**
 * The expected value of the JSON field `field` (a number in [min, max]) over its token's
 * alternatives; undefined when it cannot be weighed: no such field in the tokens' text, or its
 * number spans more than one token (then the alternatives of the first are not scores).
 */
export function weightedScore(
  tokens: readonly TokenLogprob[],
  field = 'score',
  range: [number, number] = [0, 100],
): WeightedScore | undefined {
  const text = tokens.map((t) => t.token).join('');
  const key = new RegExp(`"${field}"\\s*:\\s*`).exec(text);
  if (!key) return undefined;
  // The token at which the number starts, possibly with the separator's space glued on.
  let offset = 0;
  let index = -1;
  const start = key.index + key[0].length;
  for (let i = 0; i < tokens.length; i += 1) {
    const token = tokens[i] as TokenLogprob;
    const end = offset + token.token.length;
    if (end > start && token.token.trim() !== '') {
      index = i;
      break;
    }
    offset = end;
  }
  const token = tokens[index];
  if (!token) return undefined;
  const stated = scoreOf(token.token, ...range);
  const next = tokens[index + 1]?.token ?? '';
  // "7" then "2": the alternatives of "7" are first digits, not scores.
  if (stated === undefined || /^\d/.test(next)) return undefined;
  let mass = 0;
  let sum = 0;
  // " 72" and "72" are two spellings of one score: both count.
  for (const alt of token.top.length > 0 ? token.top : [token]) {
    const value = scoreOf(alt.token, ...range);
    if (value === undefined) continue;
    const p = Math.exp(alt.logprob);
    mass += p;
    sum += p * value;
  }
  if (mass <= 0) return undefined;
  return { score: Math.round((sum / mass) * 100) / 100, stated, mass: Math.min(1, mass) };
}
