import type { PlanApprovalWait } from '../../../shared/domain/human-wait.js';
import type { Session } from '../../../shared/domain/session.js';
import { html, UI_PATH, type Html } from './html.js';

/** How an approval that times out ends; nothing when it waits for ever. */
function endsOnItsOwn(wait: Pick<PlanApprovalWait, 'timeoutAt' | 'onTimeout'>): Html {
  if (!wait.timeoutAt) return html``;
  return html`Nobody answering, it is
    <strong>${wait.onTimeout === 'approve' ? 'approved' : 'rejected'}</strong> at
    <time datetime="${wait.timeoutAt}">${wait.timeoutAt}</time>.`;
}

/**
 * A session waiting for a person (issue 48): the plan with its score and the judge's issues
 * and suggestions, and, unless read-only, approve, reject with feedback and edit, each asking
 * for confirmation first. Each answer names the wait shown, so an answer to a plan the page
 * showed before a replan is refused (409 WAIT_ENDED) rather than applied to the next one.
 */
export function waitView(session: Session, readOnly: boolean): Html {
  const { wait } = session;
  if (!wait) return html``;
  const base = `${UI_PATH}/sessions/${session.id}`;
  const withWait = (body: Record<string, unknown>) => JSON.stringify({ ...body, waitId: wait.id });
  return html`<section class="wait" aria-label="waiting for a person" data-wait="${wait.id}">
    <h2>Waiting for your approval: plan ${wait.attempt + 1}</h2>
    <p>
      Score <strong data-score>${wait.score ?? 'n/a'}</strong>. ${wait.reason}.
      ${endsOnItsOwn(wait)}
    </p>
    <ol class="wait-plan">
      ${wait.plan.tasks.map(
        (t) =>
          html`<li data-task="${t.id}">
            <code>${t.id}</code> <strong>${t.title}</strong>
            ${
              t.dependencies.length
                ? html` <span class="muted">after ${t.dependencies.join(', ')}</span>`
                : ''
            }
            <div class="muted">${t.acceptance}</div>
          </li>`,
      )}
    </ol>
    ${
      wait.issues.length
        ? html`<h3>Issues the judge found</h3>
            <ul class="issues">
              ${wait.issues.map((i) => html`<li>${i}</li>`)}
            </ul>`
        : ''
    }
    ${
      wait.suggestions.length
        ? html`<h3>Suggestions</h3>
            <ul class="suggestions">
              ${wait.suggestions.map((i) => html`<li>${i}</li>`)}
            </ul>`
        : ''
    }
    ${
      readOnly
        ? html`<p class="muted">Read-only: no answers here.</p>`
        : html`<label
              >Feedback for the Planner (with reject)
              <textarea id="reject-feedback" rows="2"></textarea>
            </label>
            <details>
              <summary>Edit the plan (JSON)</summary>
              <textarea id="plan-edit" rows="12" spellcheck="false">
${JSON.stringify(wait.plan, null, 2)}</textarea>
              <label
                ><input type="checkbox" id="allow-term-loss" /> run it even if it drops required
                terms</label
              >
            </details>
            <div class="buttons">
              <button
                type="button"
                data-action="${base}/approve"
                data-body="${withWait({})}"
                data-confirm="Approve this plan and start its tasks?"
              >
                Approve plan
              </button>
              <button
                type="button"
                data-action="${base}/reject"
                data-body="${withWait({})}"
                data-note="#reject-feedback"
                data-field="feedback"
                data-confirm="Reject this plan and send the feedback to the Planner?"
              >
                Reject with feedback
              </button>
              <button
                type="button"
                data-action="${base}/edit"
                data-body="${withWait({})}"
                data-plan="#plan-edit"
                data-flag="#allow-term-loss"
                data-confirm="Run your edited plan instead?"
              >
                Run edited plan
              </button>
            </div>`
    }
  </section>`;
}

/**
 * The questions blocked tasks ask a person (issue 48): each with the judge's question and, unless
 * read-only, a box for the answer, sent after a confirmation; the task then runs again with it.
 * The answer names the question shown, so one to a question answered meanwhile is refused.
 */
export function questionsView(session: Session, readOnly: boolean): Html {
  const questions = session.questions ?? [];
  if (questions.length === 0) return html``;
  const base = `${UI_PATH}/sessions/${session.id}`;
  return html`<section class="wait questions" aria-label="questions for a person">
    <h2>Waiting for your answer</h2>
    ${questions.map(
      (q) =>
        html`<div class="question" data-wait="${q.id}">
          <p>Task <code>${q.taskId}</code> asks: <strong data-question>${q.question}</strong></p>
          <p class="muted">${q.reason}</p>
          ${
            q.timeoutAt
              ? html`<p class="muted">
                  Nobody answering, the agent goes on without an answer at
                  <time datetime="${q.timeoutAt}">${q.timeoutAt}</time>.
                </p>`
              : ''
          }
          ${
            readOnly
              ? html`<p class="muted">Read-only: no answers here.</p>`
              : html`<label
                    >Your answer
                    <textarea data-answer-for="${q.id}" rows="2"></textarea>
                  </label>
                  <div class="buttons">
                    <button
                      type="button"
                      data-action="${base}/answer"
                      data-body="${JSON.stringify({ waitId: q.id, taskId: q.taskId })}"
                      data-note="textarea[data-answer-for='${q.id}']"
                      data-field="text"
                      data-confirm="${q.step === undefined ? `Send this answer and run task ${q.taskId} again with it?` : `Send this answer to the agent of task ${q.taskId}?`}"
                    >
                      Answer
                    </button>
                  </div>`
          }
        </div>`,
    )}
  </section>`;
}

/**
 * The steps of running tasks that wait for a person's approval (approval.steps, issue 48): the
 * exact command or tool input each would run, and, unless read-only, Approve and Reject (with a
 * reason the executor hears), each after a confirmation. Each names the wait shown.
 */
export function stepsView(session: Session, readOnly: boolean): Html {
  const steps = session.stepWaits ?? [];
  if (steps.length === 0) return html``;
  const base = `${UI_PATH}/sessions/${session.id}`;
  return html`<section class="wait steps" aria-label="steps waiting for approval">
    <h2>Waiting for your approval: steps</h2>
    ${steps.map((w) => {
      const body = JSON.stringify({ waitId: w.id, taskId: w.taskId });
      return html`<div class="step" data-wait="${w.id}">
        <p>
          Task <code>${w.taskId}</code> would run
          ${w.command !== undefined ? html`<code data-command>${w.command}</code>` : html`<code>${w.tool}</code>`}
          <span class="muted">(${w.rule}, step ${w.step} of execution ${w.attempt})</span>
        </p>
        <pre data-input>${JSON.stringify(w.input, null, 2)}</pre>
        ${w.timeoutAt ? html`<p class="muted">${endsOnItsOwn(w)}</p>` : ''}
        ${
          readOnly
            ? html`<p class="muted">Read-only: no answers here.</p>`
            : html`<label
                  >Why not (with reject)
                  <textarea data-reason-for="${w.id}" rows="2"></textarea>
                </label>
                <div class="buttons">
                  <button
                    type="button"
                    data-action="${base}/approve"
                    data-body="${body}"
                    data-confirm="Run this step of task ${w.taskId}?"
                  >
                    Approve step
                  </button>
                  <button
                    type="button"
                    data-action="${base}/reject"
                    data-body="${body}"
                    data-note="textarea[data-reason-for='${w.id}']"
                    data-field="feedback"
                    data-confirm="Reject this step? Task ${w.taskId} hears your reason."
                  >
                    Reject step
                  </button>
                </div>`
        }
      </div>`;
    })}
  </section>`;
}
