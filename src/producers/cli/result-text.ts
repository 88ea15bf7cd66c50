import type { SessionResult } from '../../shared/domain/result.js';
import { builtinNote } from '../../shared/config/builtin-roles.js';
import { integrationLines } from '../../shared/rules/session-result.js';

/** The result's notes, after the one saying no model made it when the builtin provider did. */
function notesOf(result: SessionResult): string[] {
  const builtin = builtinNote(result.builtinRoles);
  return [...(builtin ? [builtin] : []), ...result.notes];
}

/**
 * `orq result`'s stderr: the result branch when there is one, and a line per note when the
 * result is partial (what is missing and why) or the builtin provider made it; nothing for a
 * complete one a model made without git work. The text itself goes to stdout alone, so it can
 * be redirected.
 */
export function resultNotices(result: SessionResult): string {
  return [...integrationLines(result.integration, result.finalJudgement), ...notesOf(result)]
    .map((line) => `orq: ${line}\n`)
    .join('');
}

/** The result as `orq run` ends with it, after the final table: its notes, then its text. */
export function formatResultSection(result: SessionResult): string {
  const head = result.complete ? 'result:' : 'result (partial):';
  const notes = [
    ...integrationLines(result.integration, result.finalJudgement),
    ...notesOf(result).map((note) => `note: ${note}`),
  ];
  const body = result.text === '' ? '(no output)' : result.text.trimEnd();
  return [head, ...notes, ...(notes.length > 0 ? [''] : []), body].join('\n');
}
