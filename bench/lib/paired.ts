/** Paired rounds of two variants measured in one process (bench/compare.ts). Pure. */
import { median, percentile } from './stats.js';

export type Side = 'base' | 'change';

/**
 * Which side runs first in `round`: base first in even rounds, change first in odd ones, so
 * neither side always runs right after the other (warm caches, a GC debt left behind).
 */
export function pairOrder(round: number): [Side, Side] {
  return round % 2 === 0 ? ['base', 'change'] : ['change', 'base'];
}

export interface PairedSummary {
  rounds: number;
  /** The median over rounds of change ÷ base: below 1, the change costs less. */
  ratio: number;
  /** The lowest and highest single-round ratio: the spread behind the median. */
  low: number;
  high: number;
  /** The 25th and 75th percentile of the round ratios: the middle half, one odd round aside. */
  q1: number;
  q3: number;
  baseMedian: number;
  changeMedian: number;
}

/** Round i's base and change samples are a pair; machine drift hits both of a pair alike. */
export function pairedSummary(base: readonly number[], change: readonly number[]): PairedSummary {
  if (base.length === 0 || base.length !== change.length) {
    throw new Error(
      `paired samples need equal, non-zero counts (${base.length}, ${change.length})`,
    );
  }
  const ratios = base.map((b, i) => (change[i] as number) / b);
  return {
    rounds: base.length,
    ratio: median(ratios),
    low: Math.min(...ratios),
    high: Math.max(...ratios),
    q1: percentile(ratios, 25),
    q3: percentile(ratios, 75),
    baseMedian: median(base),
    changeMedian: median(change),
  };
}
