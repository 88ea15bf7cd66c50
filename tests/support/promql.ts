// The one PromQL shape deploy/kubernetes's ScaledObjects use, read and evaluated here so a test
// can tell which series a scaler sums and what it reads from a scrape of orq's /metrics:
//   sum(max by (state) (orq_queue_jobs{queue="<queue>",state=~"<a>|<b>|…"}))
// `max by (state)` collapses the same series scraped from several dashboard replicas.

export interface ScalerQuery {
  metric: string;
  queue: string;
  /** Sorted. */
  states: string[];
}

const SHAPE = /^sum\(max by \(state\) \((\w+)\{queue="(\w+)",state=~"(\w+(?:\|\w+)*)"\}\)\)$/;

export function scalerQuery(query: string): ScalerQuery {
  const match = SHAPE.exec(query.trim());
  if (!match) throw new Error(`not the scaler query shape: ${query}`);
  return { metric: match[1]!, queue: match[2]!, states: match[3]!.split('|').sort() };
}

/** The query's value over one scrape (Prometheus text format) of a single dashboard. */
export function evaluateScalerQuery(query: string, scrape: string): number | undefined {
  const { metric, queue, states } = scalerQuery(query);
  let sum: number | undefined;
  for (const line of scrape.split('\n')) {
    const sample = /^(\w+)\{([^}]*)\} (\S+)$/.exec(line);
    if (!sample || sample[1] !== metric) continue;
    const labels = Object.fromEntries(
      [...sample[2]!.matchAll(/(\w+)="([^"]*)"/g)].map((m) => [m[1]!, m[2]!]),
    );
    if (labels.queue !== queue || !states.includes(labels.state ?? '')) continue;
    sum = (sum ?? 0) + Number(sample[3]);
  }
  return sum;
}

/**
 * The pod count an HPA (KEDA's, for a ScaledObject) asks for on an AverageValue metric:
 * ceil(value / target per pod), within min and max (before the HPA's 10 % tolerance and its
 * stabilization windows, which only delay a change).
 */
export function desiredReplicas(
  value: number,
  scaler: { threshold: number; min: number; max: number },
): number {
  return Math.min(scaler.max, Math.max(scaler.min, Math.ceil(value / scaler.threshold)));
}
