/**
 * A tenant's weight (tenants.weights, issue 46): its shares of the workers in fair release and of
 * every provider quota's line. Its configured one, 1 by default; never 0 or below.
 */
export function tenantWeight(weights: Readonly<Record<string, number>>, tenant: string): number {
  const weight = Object.hasOwn(weights, tenant) ? weights[tenant] : undefined;
  return weight !== undefined && weight > 0 ? weight : 1;
}
