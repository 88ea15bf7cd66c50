import { createHash } from 'node:crypto';

/**
 * `safe`, a name made from `id` for a place that refuses some ids (a git ref, a path segment):
 * as it is when it is `id` unchanged, else with a short hash of `id`, so two ids that were made
 * safe the same way (`a..b` and `a_b`) never share a branch or a folder.
 */
export function distinctName(id: string, safe: string): string {
  if (safe === id) return id;
  return `${safe}-${createHash('sha256').update(id).digest('hex').slice(0, 8)}`;
}
