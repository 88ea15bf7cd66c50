import type { SessionResult } from '../../shared/domain/result.js';
import { integrationLines } from '../../shared/rules/session-result.js';

/**
 * `orq result`'s stderr: the result branch when there is one, and a line per note when the
 * result is partial (what is missing and why). The text itself goes to stdout alone, so it can
 * be redirected.
 */
export function resultNotices(result: SessionResult): string {
  return [...integrationLines(result.integration), ...result.notes]
    .map((line) => `orq: ${line}\n`)
    .join('');
}

/** The result as `orq run` ends with it, after the final table: its notes, then its text. */
export function formatResultSection(result: SessionResult): string {
  const head = result.complete ? 'result:' : 'result (partial):';
  const notes = [
    ...integrationLines(result.integration),
    ...result.notes.map((note) => `note: ${note}`),
  ];
  const body = result.text === '' ? '(no output)' : result.text.trimEnd();
  return [head, ...notes, ...(notes.length > 0 ? [''] : []), body].join('\n');
}
