/**
 * How deep objects and arrays may nest in what a caller sends as settings (issue 41): far more
 * than any config needs (its deepest path has 5 levels), and far less than what overflows the
 * stack of the recursive walks that merge and check it. Counted without recursion.
 */
export const MAX_NESTING_DEPTH = 32;

/** Whether `value` nests objects or arrays deeper than `max` levels (the value itself is 1). */
export function nestsDeeperThan(value: unknown, max: number): boolean {
  const stack: { value: unknown; depth: number }[] = [{ value, depth: 1 }];
  while (stack.length > 0) {
    const { value: current, depth } = stack.pop()!;
    if (current === null || typeof current !== 'object') continue;
    if (depth > max) return true;
    for (const child of Object.values(current)) stack.push({ value: child, depth: depth + 1 });
  }
  return false;
}
