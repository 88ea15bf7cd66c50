import type { HistoryEntry } from '../../shared/domain/history.js';
import type { SessionView } from '../client.js';

const time = (iso: string) => iso.slice(11, 19);
const clip = (text: string, max = 120) => (text.length > max ? `${text.slice(0, max - 1)}…` : text);

/** One readable progress line for a history entry. */
export function formatHistoryEntry(entry: HistoryEntry): string {
  const who = entry.taskId ? `${entry.taskId} ` : '';
  const head = `[${time(entry.timestamp)}] ${who}`;
  switch (entry.type) {
    case 'state_change':
      return `${head}${entry.entity === 'session' ? 'session ' : ''}${entry.from ? `${entry.from} → ` : ''}${entry.to}${entry.reason ? `  (${clip(entry.reason, 100)})` : ''}`;
    case 'plan': {
      const tasks =
        'tasks' in entry.plan && Array.isArray(entry.plan.tasks) ? entry.plan.tasks.length : 0;
      return `${head}${entry.source} proposed ${tasks} task(s) (attempt ${entry.attempt})`;
    }
    case 'judgement': {
      const j = entry.judgement as Record<string, unknown>;
      return entry.subject === 'plan'
        ? `${head}judge scored the plan ${String(j.score ?? 'n/a')} (${j.isAcceptable ? 'acceptable' : 'not acceptable'})`
        : `${head}judge: ${j.success ? 'success' : 'not done'}${j.reason ? ` — ${clip(String(j.reason), 100)}` : ''}`;
    }
    case 'decision':
      return `${head}decision ${entry.decision}: ${clip(entry.reason)}`;
    case 'execution':
      return `${head}executed attempt ${entry.attempt}: ${clip(entry.result.output.split('\n')[0] ?? '', 100)}`;
    case 'error':
      return `${head}error in ${entry.role}: ${clip(entry.message)}`;
    case 'revision':
      return `${head}revision: ${clip(entry.reason)}`;
    case 'reflection':
      return `${head}reflection`;
    case 'action':
      return `${head}action ${entry.tool}${entry.error ? ` failed: ${clip(entry.error)}` : ''}`;
  }
}

/** A plain-text table of a session's tasks. */
export function formatSessionTable(view: SessionView): string {
  const { session, tasks } = view;
  const lines = [
    `session ${session.id}  ${session.state}`,
    `instruction: ${clip(session.instruction, 200)}`,
  ];
  if (session.failure) lines.push(`failure: ${session.failure.code}: ${session.failure.reason}`);
  if (tasks.length === 0) return lines.join('\n');
  const rows = tasks.map((t) => [
    t.id,
    t.state + (t.replanPending ? ' (replanning)' : ''),
    String(t.attempts),
    t.dependencies.join(',') || '-',
    clip(t.title, 60),
  ]);
  const header = ['TASK', 'STATE', 'ATTEMPTS', 'DEPENDS ON', 'TITLE'];
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const render = (r: string[]) =>
    r
      .map((c, i) => c.padEnd(widths[i] ?? 0))
      .join('  ')
      .trimEnd();
  lines.push('', render(header), ...rows.map(render));
  return lines.join('\n');
}
