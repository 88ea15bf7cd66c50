import type { HistoryEntry } from '../../../shared/domain/history.js';
import type { SessionResult } from '../../../shared/domain/result.js';
import { integrationLines, integrationPhaseLine } from '../../../shared/rules/session-result.js';
import { FINISHED_SESSION_STATES, type Session } from '../../../shared/domain/session.js';
import type { Task } from '../../../shared/domain/task.js';
import { builtinNote, builtinUse } from '../../../shared/config/builtin-roles.js';
import type { SessionUsage } from '../../../shared/store/usage-store.js';
import { entryView, fieldsView, planStory } from './history-view.js';
import { age, html, raw, stateBadge, UI_PATH, usd, type Html } from './html.js';
import { progressOf } from './sessions-page.js';
import { taskGraphSvg } from './task-graph.js';
import { questionsView, stepsView, waitView } from './wait-view.js';

export interface SessionPageData {
  session: Session;
  tasks: readonly Task[];
  usage: SessionUsage;
  history: readonly HistoryEntry[];
  result: SessionResult | undefined;
  readOnly: boolean;
  now: number;
}

export const taskHref = (sessionId: string, taskId: string): string =>
  `${UI_PATH}/sessions/${encodeURIComponent(sessionId)}/tasks/${encodeURIComponent(taskId)}`;

/** Resume (retry, skip, continue with a note) and cancel; each asks for confirmation first. */
function actions(session: Session, readOnly: boolean): Html {
  if (readOnly) return html`<p class="muted">Read-only: no actions.</p>`;
  if (FINISHED_SESSION_STATES.includes(session.state) && session.state !== 'BUDGET_EXHAUSTED')
    return html``;
  const base = `${UI_PATH}/sessions/${session.id}`;
  // A plan waiting for approval has no task to resume: its answers are in the wait's section.
  const resumable = session.state !== 'AWAITING_APPROVAL';
  return html`<section class="actions" aria-label="actions">
    <h2>Actions</h2>
    ${resumable ? resumeButtons(base) : ''}
    <div class="buttons">
      <button
        type="button"
        class="danger"
        data-action="${base}/cancel"
        data-body="{}"
        data-confirm="Cancel this session?"
      >
        Cancel session
      </button>
    </div>
    <p class="action-status" role="status" aria-live="polite"></p>
  </section>`;
}

function resumeButtons(base: string): Html {
  return html`<label
      >Note for the agent (with continue)
      <textarea name="note" id="resume-note" rows="2"></textarea>
    </label>
    <div class="buttons">
      <button
        type="button"
        data-action="${base}/resume"
        data-body='{"mode":"retry"}'
        data-confirm="Retry the blocked tasks?"
      >
        Resume: retry
      </button>
      <button
        type="button"
        data-action="${base}/resume"
        data-body='{"mode":"skip"}'
        data-confirm="Skip the blocked tasks and go on?"
      >
        Resume: skip
      </button>
      <button
        type="button"
        data-action="${base}/resume"
        data-body='{"mode":"continue"}'
        data-note="#resume-note"
        data-confirm="Continue the blocked tasks with the note?"
      >
        Resume: continue with note
      </button>
    </div>`;
}

function resultView(result: SessionResult | undefined): Html {
  if (!result) return html`<p class="muted">No result yet.</p>`;
  const merged = result.integration;
  return html`<p>${result.complete ? 'Complete' : 'Not complete'} (${result.selection} tasks).</p>
    ${
      merged
        ? html`<ul class="notes">
              ${integrationLines(merged, result.finalJudgement).map((line) => html`<li>${line}</li>`)}
            </ul>
            ${merged.diffStat ? html`<pre class="output">${merged.diffStat}</pre>` : ''}`
        : ''
    }
    ${
      result.notes.length
        ? html`<ul class="notes">
            ${result.notes.map((n) => html`<li>${n}</li>`)}
          </ul>`
        : ''
    }
    ${result.outputs.map(
      (o) =>
        html`<article class="entry">
          <header><strong>${o.taskId}</strong> ${o.title}</header>
          <pre class="output">${o.output}</pre>
        </article>`,
    )}`;
}

function tasksTable(sessionId: string, tasks: readonly Task[], usage: SessionUsage): Html {
  return html`<div class="scroll">
    <table class="tasks">
      <thead>
        <tr>
          <th>Task</th>
          <th>Title</th>
          <th>State</th>
          <th>Attempts</th>
          <th>After</th>
          <th>Tokens</th>
        </tr>
      </thead>
      <tbody>
        ${tasks.map((t) => {
          const used = usage.byTask[t.id];
          return html`<tr data-task="${t.id}" data-state="${t.state}">
            <td><a href="${taskHref(sessionId, t.id)}">${t.id}</a></td>
            <td>${t.title}</td>
            <td>${stateBadge(t.state)}</td>
            <td class="num">${t.attempts}</td>
            <td>${t.dependencies.join(', ')}</td>
            <td class="num">${used ? used.inputTokens + used.outputTokens : 0}</td>
          </tr>`;
        })}
      </tbody>
    </table>
  </div>`;
}

/** Says, above all else, that no model made what the page shows (or only some roles' part). */
function builtinBanner(session: Session): Html {
  const note = builtinNote(builtinUse(session.config).builtinRoles);
  return note ? html`<p class="builtin-note" role="note" data-builtin="true">${note}</p>` : html``;
}

export function sessionBody(data: SessionPageData): Html {
  const { session, tasks, usage } = data;
  const { done, total } = progressOf(tasks);
  const story = planStory(data.history);
  return html`<nav class="crumbs"><a href="${UI_PATH}">Sessions</a> / ${session.id}</nav>
    <h1>Session <code>${session.id}</code> ${stateBadge(session.state)}</h1>
    <p class="instruction">${session.instruction}</p>
    ${builtinBanner(session)}
    ${fieldsView({
      tenant: session.tenant,
      progress: `${done}/${total} tasks finished`,
      tokens: usage.total.inputTokens + usage.total.outputTokens,
      cost: usd(usage.total.usd),
      age: age(session.createdAt, data.now),
      integration: integrationPhaseLine(session),
      failure: session.failure ? `${session.failure.code}: ${session.failure.reason}` : undefined,
    })}
    ${waitView(session, data.readOnly)} ${questionsView(session, data.readOnly)}
    ${stepsView(session, data.readOnly)} ${actions(session, data.readOnly)}
    <section aria-label="task graph">
      <h2>Task graph</h2>
      <div class="scroll graph-box">
        ${raw(taskGraphSvg(tasks, (id) => taskHref(session.id, id)))}
      </div>
      <p class="legend muted">
        Arrows: a task waits for the one it comes from; dashed: replaced by a replan.
      </p>
    </section>
    <section aria-label="tasks">
      <h2>Tasks</h2>
      ${tasksTable(session.id, tasks, usage)}
    </section>
    <section aria-label="result">
      <h2>Result</h2>
      ${resultView(data.result)}
    </section>
    <section aria-label="plan story" class="story">
      <h2>The plan's story</h2>
      ${fieldsView({ requiredTerms: session.requiredTerms.terms, termsFrom: session.requiredTerms.source })}
      ${story.length ? story.map(entryView) : html`<p class="muted">No plan yet.</p>`}
    </section>`;
}
