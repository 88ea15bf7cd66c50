import type { HistoryEntry } from '../../../shared/domain/history.js';
import type { Artifact } from '../../../shared/domain/task.js';
import { html, type Html } from './html.js';
import { describeWaitEntry } from '../../../shared/wait-text.js';

/** One value of a decision's inputs: lists as lists, records as key/value, the rest as text. */
export function valueView(value: unknown): Html {
  if (value === undefined || value === null) return html`<span class="muted">—</span>`;
  if (Array.isArray(value)) {
    if (value.length === 0) return html`<span class="muted">none</span>`;
    if (value.every((v) => typeof v !== 'object' || v === null))
      return html`${value.map(String).join(', ')}`;
    return html`<pre>${JSON.stringify(value, null, 2)}</pre>`;
  }
  if (typeof value === 'object') return fieldsView(value as Record<string, unknown>);
  return html`${String(value)}`;
}

export function fieldsView(fields: Record<string, unknown>): Html {
  const keys = Object.keys(fields).filter((k) => fields[k] !== undefined);
  if (keys.length === 0) return html``;
  return html`<dl class="fields">
    ${keys.map(
      (k) =>
        html`<dt>${k}</dt>
          <dd data-field="${k}">${valueView(fields[k])}</dd>`,
    )}
  </dl>`;
}

interface CheckRow {
  name?: unknown;
  mode?: unknown;
  passed?: unknown;
  exitCode?: unknown;
}

/** A command executor's checks (artifact meta.checks) as a table: which passed, which did not. */
function checksView(checks: readonly CheckRow[]): Html {
  return html`<table class="checks">
    <thead>
      <tr>
        <th>Check</th>
        <th>Mode</th>
        <th>Passed</th>
        <th>Exit code</th>
      </tr>
    </thead>
    <tbody>
      ${checks.map(
        (c) =>
          html`<tr data-check="${String(c.name)}" data-passed="${String(c.passed)}">
            <td>${String(c.name)}</td>
            <td>${String(c.mode ?? '')}</td>
            <td>${c.passed === true ? 'yes' : 'no'}</td>
            <td class="num">${String(c.exitCode ?? '')}</td>
          </tr>`,
      )}
    </tbody>
  </table>`;
}

/** What an execution produced beside its output: files, a git branch, a command's checks. */
export function artifactsView(artifacts: readonly Artifact[]): Html {
  return html`${artifacts.map((artifact) => {
    const { checks, ...meta } = artifact.meta ?? {};
    return html`<div class="artifact" data-kind="${artifact.kind}">
      <strong>${artifact.kind}</strong> ${artifact.path ?? ''}
      ${Array.isArray(checks) ? checksView(checks as CheckRow[]) : ''} ${fieldsView(meta)}
      ${artifact.content ? html`<pre>${artifact.content}</pre>` : ''}
    </div>`;
  })}`;
}

const time = (iso: string): Html => html`<time datetime="${iso}">${iso.slice(11, 19)}</time>`;

/** A history entry as a card: what happened, why, and what it was decided on. */
export function entryView(entry: HistoryEntry): Html {
  const head = (what: Html | string) =>
    html`<header>${time(entry.timestamp)} <strong>${what}</strong></header>`;
  switch (entry.type) {
    case 'plan': {
      const plan = entry.plan as { summary?: string; reason?: string; tasks?: unknown[] };
      const tasks = (plan.tasks ?? []) as { id: string; title: string; dependencies?: string[] }[];
      return html`<article class="entry entry-plan" data-attempt="${entry.attempt}">
        ${head(`Plan attempt ${entry.attempt} (${entry.source})`)}
        ${plan.summary || plan.reason ? html`<p>${plan.summary || plan.reason}</p>` : ''}
        <ul>
          ${tasks.map(
            (t) =>
              html`<li>
                <code>${t.id}</code> ${t.title}${
                  t.dependencies?.length
                    ? html` <span class="muted">after ${t.dependencies.join(', ')}</span>`
                    : ''
                }
              </li>`,
          )}
        </ul>
      </article>`;
    }
    case 'judgement':
      return html`<article class="entry entry-judgement" data-subject="${entry.subject}">
        ${head(`Judgement of the ${entry.subject}, attempt ${entry.attempt}`)}
        ${fieldsView(entry.judgement as Record<string, unknown>)}
      </article>`;
    case 'decision':
      return html`<article class="entry entry-decision" data-decision="${entry.decision}">
        ${head(entry.decision)}
        <p>${entry.reason}</p>
        ${fieldsView(entry.inputs)}
      </article>`;
    case 'execution':
      return html`<article class="entry entry-execution" data-attempt="${entry.attempt}">
        ${head(`Execution, attempt ${entry.attempt}`)}
        ${entry.result.error ? html`<p class="error">${entry.result.error}</p>` : ''}
        <pre class="output">${entry.result.output}</pre>
        ${
          entry.result.log
            ? html`<details>
                <summary>Log</summary>
                <pre>${entry.result.log}</pre>
              </details>`
            : ''
        }
        ${fieldsView({
          inputTokens: entry.result.tokenUsage.inputTokens,
          outputTokens: entry.result.tokenUsage.outputTokens,
          durationMs: entry.result.durationMs,
        })}
        ${artifactsView(entry.result.artifacts)}
      </article>`;
    case 'reflection':
      return html`<article class="entry entry-reflection">
        ${head('Reflection')}${fieldsView(entry.evaluation)}
      </article>`;
    case 'revision':
      return html`<article class="entry entry-revision">
        ${head('Revision')}
        <p>${entry.reason}</p>
        ${valueView(entry.changes)}
      </article>`;
    case 'action':
      return html`<article class="entry entry-action">
        ${head(`Step: ${entry.tool}`)}${fieldsView({
          input: entry.input,
          output: entry.output,
          error: entry.error,
        })}
      </article>`;
    case 'state_change':
      return html`<article class="entry entry-state">
        ${head(`${entry.entity} ${entry.from ?? '∅'} → ${entry.to}`)}${
          entry.reason ? html`<p>${entry.reason}</p>` : ''
        }
      </article>`;
    case 'error':
      return html`<article class="entry entry-error">
        ${head(`Error in ${entry.role}`)}
        <p class="error">${entry.message}</p>
        ${fieldsView({ code: entry.code, attempt: entry.attempt })}
      </article>`;
    case 'wait':
      return html`<article class="entry entry-wait" data-action="${entry.action}">
        ${head(describeWaitEntry(entry))}
        ${entry.answer && entry.answer.action !== 'approve' ? fieldsView({ ...entry.answer }) : ''}
      </article>`;
  }
}

/** The plan's story: plans, their judgements and every decision not about one task. */
export function planStory(entries: readonly HistoryEntry[]): HistoryEntry[] {
  return entries.filter(
    (e) =>
      e.taskId === undefined &&
      (e.type === 'plan' ||
        e.type === 'decision' ||
        e.type === 'wait' ||
        (e.type === 'judgement' && e.subject === 'plan')),
  );
}
