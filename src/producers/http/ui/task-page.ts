import type { HistoryEntry } from '../../../shared/domain/history.js';
import type { Session } from '../../../shared/domain/session.js';
import type { Task } from '../../../shared/domain/task.js';
import { jobIds } from '../../../shared/queues.js';
import type { SessionUsage } from '../../../shared/store/usage-store.js';
import { BOARD_PATH } from '../auth.js';
import { entryView, fieldsView } from './history-view.js';
import { html, stateBadge, UI_PATH, usd, type Html } from './html.js';

export const boardJobHref = (queue: string, jobId: string): string =>
  `${BOARD_PATH}/queue/${queue}/${encodeURIComponent(jobId)}`;

/**
 * The task's jobs in Bull Board: one work and one judge job per attempt, one replan job per
 * replan. A judge job's id names the fence of a later delivery whose result was judged, as the
 * attempt's execution in `history` records it.
 */
export function taskJobs(
  sessionId: string,
  task: Task,
  history: readonly HistoryEntry[] = [],
): { queue: string; jobId: string }[] {
  const fences = new Map<number, number>();
  for (const entry of history) {
    if (entry.type === 'execution' && entry.taskId === task.id && entry.fence) {
      fences.set(entry.attempt, entry.fence);
    }
  }
  // An execution resumed after a person's answer to its step wait ran on in a job of its own.
  const resumed = new Map<number, string[]>();
  for (const entry of history) {
    if (entry.type !== 'wait' || entry.action !== 'answered' || entry.taskId !== task.id) continue;
    const of = /^(?:step|ask)-/.exec(entry.waitId);
    const attempt = of
      ? Number(entry.waitId.slice(of[0].length + task.id.length + 1).split('-')[0])
      : NaN;
    if (Number.isInteger(attempt))
      resumed.set(attempt, [...(resumed.get(attempt) ?? []), entry.waitId]);
  }
  const jobs: { queue: string; jobId: string }[] = [];
  for (let n = 1; n <= task.attempts; n += 1) {
    jobs.push({ queue: 'work', jobId: jobIds.execute(sessionId, task.id, n) });
    for (const waitId of resumed.get(n) ?? []) {
      jobs.push({ queue: 'work', jobId: jobIds.resumeExecute(sessionId, task.id, n, waitId) });
    }
    jobs.push({ queue: 'judge', jobId: jobIds.judgeTask(sessionId, task.id, n, fences.get(n)) });
  }
  if (task.replanningInfo?.replacedBy?.length || task.replanPending)
    jobs.push({ queue: 'replan', jobId: jobIds.replan(sessionId, task.id, task.attempts) });
  return jobs;
}

export interface TaskPageData {
  session: Session;
  task: Task;
  usage: SessionUsage;
  history: readonly HistoryEntry[];
}

export function taskBody({ session, task, usage, history }: TaskPageData): Html {
  const used = usage.byTask[task.id];
  const entries = history.filter((e) => e.taskId === task.id);
  const sessionHref = `${UI_PATH}/sessions/${session.id}`;
  return html`<nav class="crumbs">
      <a href="${UI_PATH}">Sessions</a> / <a href="${sessionHref}">${session.id}</a> / ${task.id}
    </nav>
    <h1>Task <code>${task.id}</code> ${stateBadge(task.state)}</h1>
    <p>${task.title}</p>
    ${fieldsView({
      acceptance: task.acceptance,
      context: task.context || undefined,
      dependencies: task.dependencies,
      dependents: task.dependents,
      attempts: task.attempts,
      continuations: task.continuations,
      executor: task.executor,
      feedback: task.feedback,
      blockedReason: task.blockedReason,
      replanning: task.replanningInfo,
      tokens: used ? used.inputTokens + used.outputTokens : 0,
      cost: usd(used?.usd ?? 0),
    })}
    <section aria-label="output">
      <h2>Output</h2>
      ${task.result ? html`<pre class="output" id="task-output">${task.result.output}</pre>` : html`<p class="muted" id="task-output">No output yet.</p>`}
      ${
        task.judgement
          ? html`<h3>Latest verdict</h3>
              ${fieldsView(task.judgement)}`
          : ''
      }
    </section>
    <section aria-label="jobs">
      <h2>Jobs in Bull Board</h2>
      ${
        taskJobs(session.id, task, entries).length
          ? html`<ul class="jobs">
              ${taskJobs(session.id, task, entries).map(
                (j) =>
                  html`<li>
                    <a href="${boardJobHref(j.queue, j.jobId)}">${j.queue}: ${j.jobId}</a>
                  </li>`,
              )}
            </ul>`
          : html`<p class="muted">No job yet.</p>`
      }
    </section>
    <section aria-label="history">
      <h2>What happened</h2>
      ${entries.length ? entries.map(entryView) : html`<p class="muted">Nothing yet.</p>`}
    </section>`;
}
