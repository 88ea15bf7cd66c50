import { SessionState, type Session } from '../../../shared/domain/session.js';
import { FINISHED_TASK_STATES, type Task } from '../../../shared/domain/task.js';
import { BUILTIN_PROVIDER, builtinUse } from '../../../shared/config/builtin-roles.js';
import type { SessionUsage } from '../../../shared/store/usage-store.js';
import { age, html, stateBadge, UI_PATH, usd, type Html } from './html.js';

export interface SessionRow {
  session: Session;
  tasks: readonly Task[];
  usage: SessionUsage;
}

const INSTRUCTION_CHARS = 80;

/** Tasks that count toward progress: a task replaced by a replan is counted as its subtasks. */
export function progressOf(tasks: readonly Task[]): { done: number; total: number } {
  const counted = tasks.filter((t) => t.state !== 'REPLACED_BY_REPLAN');
  const done = counted.filter((t) => FINISHED_TASK_STATES.includes(t.state)).length;
  return { done, total: counted.length };
}

function row({ session, tasks, usage }: SessionRow, now: number): Html {
  const { done, total } = progressOf(tasks);
  const tokens = usage.total.inputTokens + usage.total.outputTokens;
  const instruction =
    session.instruction.length > INSTRUCTION_CHARS
      ? `${session.instruction.slice(0, INSTRUCTION_CHARS - 1)}…`
      : session.instruction;
  return html`<tr data-session="${session.id}" data-state="${session.state}">
    <td><a href="${UI_PATH}/sessions/${session.id}">${session.id}</a></td>
    <td>${stateBadge(session.state)}</td>
    <td>${session.tenant}</td>
    <td class="instruction">
      ${instruction}
      ${
        builtinUse(session.config).ranByBuiltin
          ? html`<span class="tag" title="${BUILTIN_PROVIDER} played some or all roles"
              >builtin</span
            >`
          : ''
      }
    </td>
    <td><progress max="${Math.max(total, 1)}" value="${done}"></progress> ${done}/${total}</td>
    <td class="num">${tokens}</td>
    <td class="num">${usd(usage.total.usd)}</td>
    <td class="num" title="${session.createdAt}">${age(session.createdAt, now)}</td>
  </tr>`;
}

/** The session list with a state filter (a plain GET form, so it works without script). */
export function sessionsBody(
  rows: readonly SessionRow[],
  filter: SessionState | undefined,
  now: number,
): Html {
  const options = SessionState.options.map(
    (state) =>
      html`<option value="${state}" ${state === filter ? ' selected' : ''}>${state}</option>`,
  );
  const shown = filter ? rows.filter((r) => r.session.state === filter) : rows;
  return html`<h1>Sessions</h1>
    <form method="get" action="${UI_PATH}" class="filter">
      <label
        >State
        <select name="state">
          <option value="">any</option>
          ${options}
        </select></label
      >
      <button type="submit">Filter</button>
    </form>
    ${
      shown.length === 0
        ? html`<p class="muted">No sessions${filter ? html` in ${filter}` : ''}.</p>`
        : html`<div class="scroll">
            <table class="sessions">
              <thead>
                <tr>
                  <th>Session</th>
                  <th>State</th>
                  <th>Tenant</th>
                  <th>Instruction</th>
                  <th>Progress</th>
                  <th>Tokens</th>
                  <th>Cost</th>
                  <th>Age</th>
                </tr>
              </thead>
              <tbody>
                ${shown.map((r) => row(r, now))}
              </tbody>
            </table>
          </div>`
    }`;
}
