/** Summary statistics of measured samples. Pure. */

/** The p-th percentile (0–100) with linear interpolation between the closest ranks. */
export function percentile(values: readonly number[], p: number): number {
  if (values.length === 0) return Number.NaN;
  const sorted = [...values].sort((a, b) => a - b);
  const rank = (Math.min(100, Math.max(0, p)) / 100) * (sorted.length - 1);
  const low = Math.floor(rank);
  const high = Math.ceil(rank);
  const lowValue = sorted[low] as number;
  const highValue = sorted[high] as number;
  return lowValue + (highValue - lowValue) * (rank - low);
}

export function mean(values: readonly number[]): number {
  if (values.length === 0) return Number.NaN;
  let sum = 0;
  for (const v of values) sum += v;
  return sum / values.length;
}

export function median(values: readonly number[]): number {
  return percentile(values, 50);
}

export interface Summary {
  n: number;
  mean: number;
  p50: number;
  p95: number;
  max: number;
}

export function summarize(values: readonly number[]): Summary {
  return {
    n: values.length,
    mean: mean(values),
    p50: percentile(values, 50),
    p95: percentile(values, 95),
    max: values.length ? Math.max(...values) : Number.NaN,
  };
}

/** Rounds for printing: keeps 3 significant digits below 100, whole numbers above. */
export function round(value: number, digits = 3): number {
  if (!Number.isFinite(value)) return value;
  if (Math.abs(value) >= 100) return Math.round(value);
  return Number(value.toPrecision(digits));
}

/** Rounds every number of a plain object (one level deep, and in nested plain objects). */
export function roundAll<T>(value: T, digits = 3): T {
  if (typeof value === 'number') return round(value, digits) as T;
  if (Array.isArray(value)) return value.map((v: unknown) => roundAll(v, digits)) as T;
  if (value && typeof value === 'object') {
    return Object.fromEntries(
      Object.entries(value).map(([k, v]) => [k, roundAll(v as unknown, digits)]),
    ) as T;
  }
  return value;
}
