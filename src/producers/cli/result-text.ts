import type { SessionResult } from '../../shared/domain/result.js';

/**
 * `orq result`'s stderr: a line per note when the result is partial (what is missing and why),
 * nothing for a complete one. The text itself goes to stdout alone, so it can be redirected.
 */
export function resultNotices(result: SessionResult): string {
  return result.notes.map((note) => `orq: ${note}\n`).join('');
}

/** The result as `orq run` ends with it, after the final table: its notes, then its text. */
export function formatResultSection(result: SessionResult): string {
  const head = result.complete ? 'result:' : 'result (partial):';
  const notes = result.notes.map((note) => `note: ${note}`);
  const body = result.text === '' ? '(no output)' : result.text.trimEnd();
  return [head, ...notes, ...(notes.length > 0 ? [''] : []), body].join('\n');
}
