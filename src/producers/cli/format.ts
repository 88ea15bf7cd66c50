import type { QuotaView } from '../../shared/domain/quota.js';
import { integrationLines, integrationPhaseLine } from '../../shared/rules/session-result.js';
import type { TenantLoad } from '../../shared/store/tenant-load.js';
import type { HistoryEntry } from '../../shared/domain/history.js';
import { openWaits, type Session } from '../../shared/domain/session.js';
import { isExecuting, TaskState, type Task } from '../../shared/domain/task.js';
import type { SessionView } from '../client.js';
import { BUDGET_RESUME_HINT } from '../../shared/budget.js';
import type { Role } from '../../shared/queues.js';
import { describeWaitEntry, stepText } from '../../shared/wait-text.js';
import type {
  PlanApprovalWait,
  QuestionWait,
  StepApprovalWait,
} from '../../shared/domain/human-wait.js';

const time = (iso: string) => iso.slice(11, 19);
const clip = (text: string, max = 120) => (text.length > max ? `${text.slice(0, max - 1)}…` : text);
const oneLine = (text: string) => text.replace(/\s+/g, ' ').trim();

/** East Asian wide and fullwidth characters (and emoji) take two terminal columns. */
const WIDE =
  /[\u1100-\u115f\u2e80-\u303e\u3041-\u33ff\u3400-\u4dbf\u4e00-\u9fff\ua000-\ua4cf\uac00-\ud7a3\uf900-\ufaff\ufe30-\ufe4f\uff00-\uff60\uffe0-\uffe6\u{1f300}-\u{1faff}\u{20000}-\u{3fffd}]/u;

const charWidth = (ch: string) => (WIDE.test(ch) ? 2 : 1);

/** Terminal columns a string takes. */
export function displayWidth(text: string): number {
  let width = 0;
  for (const ch of text) width += charWidth(ch);
  return width;
}

/** Cuts a line to `width` terminal columns, so a redraw erases exactly the lines it drew. */
export function clipToWidth(text: string, width: number): string {
  if (displayWidth(text) <= width) return text;
  let used = 0;
  let out = '';
  for (const ch of text) {
    if (used + charWidth(ch) > width - 1) break;
    used += charWidth(ch);
    out += ch;
  }
  return `${out}…`;
}

/** The subtasks of an agent's plan (task_decomposition.subtasks); undefined if it has none. */
function agentSubtasks(plan: unknown): number | undefined {
  const decomposition = (plan as { task_decomposition?: { subtasks?: unknown } } | undefined)
    ?.task_decomposition;
  return Array.isArray(decomposition?.subtasks) ? decomposition.subtasks.length : undefined;
}

/** One readable progress line for a history entry. */
export function formatHistoryEntry(entry: HistoryEntry): string {
  const who = entry.taskId ? `${entry.taskId} ` : '';
  const head = `[${time(entry.timestamp)}] ${who}`;
  switch (entry.type) {
    case 'state_change':
      return `${head}${entry.entity === 'session' ? 'session ' : ''}${entry.from ? `${entry.from} → ` : ''}${entry.to}${entry.reason ? `  (${clip(oneLine(entry.reason), 100)})` : ''}`;
    case 'plan': {
      if (entry.source === 'agent') {
        // An agent's in-task plan (seed 004) lists subtasks, not tasks of the session.
        const subtasks = agentSubtasks(entry.plan);
        return `${head}agent planned ${subtasks === undefined ? 'its work' : `${subtasks} subtask(s)`} (execution ${entry.attempt})`;
      }
      const tasks =
        'tasks' in entry.plan && Array.isArray(entry.plan.tasks) ? entry.plan.tasks.length : 0;
      return `${head}${entry.source} proposed ${tasks} task(s) (attempt ${entry.attempt})`;
    }
    case 'judgement': {
      const j = entry.judgement as Record<string, unknown>;
      return entry.subject === 'plan'
        ? `${head}judge scored the plan ${String(j.score ?? 'n/a')} (${j.isAcceptable ? 'acceptable' : 'not acceptable'})${Array.isArray(j.samples) && j.samples.length > 1 ? ` — median of ${j.samples.join(', ')}, spread ${String(j.spread)}` : ''}`
        : `${head}judge: ${j.success ? 'success' : 'not done'}${j.reason ? ` — ${clip(oneLine(String(j.reason)), 100)}` : ''}`;
    }
    case 'decision':
      return `${head}decision ${entry.decision}: ${clip(oneLine(entry.reason))}`;
    case 'execution': {
      // A failed run has no output to show, only its error.
      const { output, error } = entry.result;
      const said = output.trim() === '' && error ? `failed: ${error}` : output;
      return `${head}executed attempt ${entry.attempt}: ${clip(said.split('\n')[0] ?? '', 100)}`;
    }
    case 'error':
      return `${head}error in ${entry.role}: ${clip(oneLine(entry.message))}`;
    case 'revision':
      return `${head}revision: ${clip(oneLine(entry.reason))}`;
    case 'reflection':
      return `${head}reflection`;
    case 'action':
      return `${head}action ${entry.tool}${entry.awaiting ? ' waits for a person' : ''}${entry.error ? ` failed: ${clip(oneLine(entry.error))}` : ''}`;
    case 'wait':
      return `${head}${describeWaitEntry(entry)}`;
  }
}

/** How many tasks are in each state, in the order of the TaskState enum. */
export function countTaskStates(tasks: readonly Task[]): [TaskState, number][] {
  const counts = new Map<TaskState, number>();
  for (const task of tasks) counts.set(task.state, (counts.get(task.state) ?? 0) + 1);
  return TaskState.options.flatMap((state) => {
    const n = counts.get(state);
    return n ? [[state, n] as [TaskState, number]] : [];
  });
}

/**
 * `5 tasks: 3 DONE · 1 RUNNING · 1 READY`; with `queued` (executing tasks no worker has taken
 * yet), `12 RUNNING (10 queued)`.
 */
export function formatTaskCounts(tasks: readonly Task[], queued: readonly string[] = []): string {
  const waiting = new Set(queued);
  const queuedByState = new Map(countTaskStates(tasks.filter((t) => waiting.has(t.id))));
  const counts = countTaskStates(tasks).map(([state, n]) => {
    const q = queuedByState.get(state);
    return q ? `${n} ${state} (${q} queued)` : `${n} ${state}`;
  });
  return `${tasks.length} task${tasks.length === 1 ? '' : 's'}${counts.length ? `: ${counts.join(' · ')}` : ''}`;
}

/** Aligned columns; the last column is not padded. */
function renderTable(header: string[], rows: string[][]): string[] {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const render = (r: string[]) =>
    r
      .map((c, i) => c.padEnd(widths[i] ?? 0))
      .join('  ')
      .trimEnd();
  return [render(header), ...rows.map(render)];
}

/** view.queued as a set, built once per view: a table of 10,000 tasks asks per row. */
const queuedSets = new WeakMap<readonly string[], ReadonlySet<string>>();
function isQueued(view: SessionView, taskId: string): boolean {
  let set = queuedSets.get(view.queued);
  if (!set) queuedSets.set(view.queued, (set = new Set(view.queued)));
  return set.has(taskId);
}

/**
 * The task's state; a READY task that still waits for dependencies says for how many, and an
 * executing one whose work job no worker has taken yet says so (RUNNING means queued or run).
 */
function taskState(t: Task, view: SessionView): string {
  if (t.replanPending) return `${t.state} (replanning)`;
  if (isQueued(view, t.id)) return `${t.state} (queued)`;
  if (t.state === 'READY' && t.pendingDependencies > 0) {
    return `READY (waits for ${t.pendingDependencies})`;
  }
  return t.state;
}

/** A duration as a person reads it: 0.4s, 12s, 3m 05s, 2h 07m. */
export function formatElapsed(ms: number): string {
  const seconds = Math.max(0, ms) / 1000;
  if (seconds < 10) return `${seconds.toFixed(1)}s`;
  if (seconds < 60) return `${Math.floor(seconds)}s`;
  const minutes = Math.floor(seconds / 60);
  if (minutes < 60) return `${minutes}m ${String(Math.floor(seconds % 60)).padStart(2, '0')}s`;
  return `${Math.floor(minutes / 60)}h ${String(minutes % 60).padStart(2, '0')}m`;
}

/** How long the task's latest execution ran, or has run so far ('-': it has not started). */
function taskTime(t: Task, now: number): string {
  if (!t.startedAt) return '-';
  const end = t.endedAt ? Date.parse(t.endedAt) : now;
  return formatElapsed(end - Date.parse(t.startedAt));
}

interface TaskColumn {
  header: string;
  cell: (task: Task, view: SessionView, now: number, following: boolean) => string;
  /**
   * Shown in the live view while it follows a session too. The others appear only in full
   * tables (`orq status`, and the live view's final frame, which is what `orq run` and
   * `orq watch` leave on screen): while following they would leave the titles little room.
   */
  following: boolean;
}

/** The task table's columns, one definition for `orq status` and the live view. */
const TASK_COLUMNS: readonly TaskColumn[] = [
  { header: 'TASK', cell: (t) => t.id, following: true },
  { header: 'STATE', cell: taskState, following: true },
  { header: 'ATTEMPTS', cell: (t) => String(t.attempts), following: true },
  { header: 'TIME', cell: (t, _view, now) => taskTime(t, now), following: true },
  { header: 'DEPENDS ON', cell: (t) => t.dependencies.join(',') || '-', following: false },
  { header: 'TOKENS IN/OUT', cell: (t, view) => taskTokens(view, t.id), following: false },
  // While following, the frame's lines are clipped to the terminal: a wide one shows it all.
  {
    header: 'TITLE',
    cell: (t, _view, _now, following) =>
      following ? oneLine(t.title) : clip(oneLine(t.title), 60),
    following: true,
  },
];

/** The table of `tasks` (some of the view's), with every column or those shown while following. */
function taskTable(
  view: SessionView,
  tasks: readonly Task[],
  now: number,
  { following = false }: { following?: boolean } = {},
): string[] {
  const columns = following ? TASK_COLUMNS.filter((c) => c.following) : TASK_COLUMNS;
  return renderTable(
    columns.map((c) => c.header),
    tasks.map((t) => columns.map((c) => c.cell(t, view, now, following))),
  );
}

function sessionHeader(session: Session): string[] {
  const lines = [
    `session ${session.id}  ${session.state}`,
    `instruction: ${clip(oneLine(session.instruction), 200)}`,
  ];
  if (session.state === 'PLANNING') lines.push(planningLine(session));
  if (session.wait) lines.push(...waitLines(session.id, session.wait));
  for (const question of session.questions ?? [])
    lines.push(...questionLines(session.id, question, session.state));
  for (const step of session.stepWaits ?? []) lines.push(...stepLines(session.id, step));
  const phase = integrationPhaseLine(session);
  if (phase) lines.push(phase);
  if (session.integration?.outcome) {
    lines.push(
      ...integrationLines(session.integration.outcome, session.integration.verdict).map(
        (l) => `integration: ${l}`,
      ),
    );
  }
  if (session.failure) lines.push(`failure: ${session.failure.code}: ${session.failure.reason}`);
  return lines;
}

/** How an approval that times out ends, as its first line says it; empty when it waits for ever. */
function endsOnItsOwn(wait: Pick<PlanApprovalWait, 'timeoutAt' | 'onTimeout'>): string {
  if (!wait.timeoutAt) return '';
  return ` (${wait.onTimeout === 'approve' ? 'approved' : 'rejected'} at ${wait.timeoutAt} if nobody answers)`;
}

/** A plan that waits for a person: what they are shown, and the commands that answer. */
export function waitLines(sessionId: string, wait: PlanApprovalWait): string[] {
  const lines = [
    `waiting for a person: plan approval ${wait.id}${endsOnItsOwn(wait)}`,
    `plan: score ${wait.score ?? 'n/a'}, ${wait.plan.tasks.length} task(s); accepted: ${clip(oneLine(wait.reason), 160)}`,
    ...wait.plan.tasks.map(
      (t) =>
        `  ${t.id}  ${clip(oneLine(t.title), 100)}${t.dependencies.length ? `  (after ${t.dependencies.join(', ')})` : ''}`,
    ),
    ...wait.issues.map((i) => `issue: ${clip(oneLine(i), 160)}`),
    ...wait.suggestions.map((i) => `suggestion: ${clip(oneLine(i), 160)}`),
    `answer: orq approve ${sessionId} | orq reject ${sessionId} --feedback "…" | orq plan ${sessionId} > plan.yaml, edit it, orq edit ${sessionId} plan.yaml`,
  ];
  return lines;
}

/**
 * A question a blocked task asks a person, and the command that answers it: once the budget is
 * raised, when the budget stopped the session (the question stays open meanwhile).
 */
export function questionLines(
  sessionId: string,
  question: QuestionWait,
  state?: Session['state'],
): string[] {
  const raise =
    state === 'BUDGET_EXHAUSTED'
      ? `raise the budget first (orq resume ${sessionId} --max-tokens N), then `
      : '';
  return [
    `waiting for a person: question ${question.id} of task ${question.taskId}${question.timeoutAt ? ` (the agent goes on without an answer at ${question.timeoutAt} if nobody answers)` : ''}`,
    `question: ${clip(oneLine(question.question), 400)}`,
    `answer: ${raise}orq answer ${sessionId} --task ${question.taskId} "…"`,
  ];
}

/** A step of a running task that waits for a person's approval, and the commands that answer. */
export function stepLines(sessionId: string, wait: StepApprovalWait): string[] {
  return [
    `waiting for a person: step approval ${wait.id} of task ${wait.taskId} (${wait.rule})${endsOnItsOwn(wait)}`,
    wait.command !== undefined ? `command: ${wait.command}` : `tool: ${wait.tool}`,
    ...(wait.command === undefined || wait.tool !== 'command'
      ? [`input: ${clip(JSON.stringify(wait.input) ?? '', 2000)}`]
      : []),
    `answer: orq approve ${sessionId} --wait ${wait.id} | orq reject ${sessionId} --wait ${wait.id} --feedback "why"`,
  ];
}

/** The sessions waiting for a person, under `orq status`'s list; empty when none waits. */
export function formatWaitingList(sessions: readonly Session[]): string {
  if (sessions.length === 0) return '';
  return [
    `waiting for a person (${sessions.length}):`,
    ...sessions.flatMap((s) =>
      openWaits(s).map(
        (w) =>
          `  ${s.id}  ${w.kind} ${w.id}  since ${w.openedAt}  ${clip(oneLine(w.kind === 'question' ? w.question : w.kind === 'step-approval' ? stepText(w) : s.instruction), 60)}`,
      ),
    ),
  ].join('\n');
}

/** Where planning stands: which plan is being made or judged, and what became of the last. */
export function planningLine(session: Session): string {
  const { attempt, refinementHistory } = session.planning;
  const current = attempt === 0 ? 'the first plan' : `plan ${attempt + 1} (replan ${attempt})`;
  const last = refinementHistory.at(-1);
  if (!last) return `planning: ${current} is being made or judged`;
  const score = last.currentScore === undefined ? 'no score' : `score ${last.currentScore}`;
  return `planning: ${current} is being made or judged; the last plan got ${score} → ${last.decision}: ${clip(oneLine(last.reason), 120)}`;
}

/** A plain-text table of a session's tasks (`orq status <id>`); `now` dates running tasks. */
export function formatSessionTable(view: SessionView, now = Date.now()): string {
  const { session, tasks } = view;
  const lines = [...sessionHeader(session), ...formatUsage(view)];
  if (tasks.length === 0) return lines.join('\n');
  lines.push(formatTaskCounts(tasks, view.queued));
  lines.push(
    '',
    ...taskTable(view, tasks, now),
    ...progressLines(view, now),
    ...blockedReasons(tasks),
  );
  return lines.join('\n');
}

/** Running tasks' progress shown in the live view, at most: the rest are counted. */
const LIVE_PROGRESS_LINES = 3;

/**
 * What each running task's execution is doing (its executor's last report), under the table:
 * `t3: agent: 12KB of output; last: Running tests (4.0s ago)`. At most `max` lines.
 */
function progressLines(view: SessionView, now: number, max = Infinity): string[] {
  const reports = view.tasks.flatMap((t) => {
    const report = view.progress[t.id];
    return isExecuting(t) && report ? [{ id: t.id, report }] : [];
  });
  if (reports.length === 0) return [];
  const shown = reports.slice(0, max).map(({ id, report }) => {
    const ago = formatElapsed(now - Date.parse(report.at));
    return `  ${id}: ${clip(oneLine(report.activity), 160)} (${ago} ago)`;
  });
  if (reports.length > shown.length) shown.push(`  … ${reports.length - shown.length} more`);
  return ['', 'now:', ...shown];
}

/** Why each BLOCKED task is blocked, under the table. */
function blockedReasons(tasks: readonly Task[]): string[] {
  const blocked = tasks.filter((t) => t.state === 'BLOCKED' && t.blockedReason);
  if (blocked.length === 0) return [];
  return ['', ...blocked.map((t) => `${t.id} is blocked: ${oneLine(t.blockedReason ?? '')}`)];
}

const usd = (value: number) =>
  `$${value < 0.01 && value > 0 ? value.toPrecision(2) : value.toFixed(2)}`;

function taskTokens(view: SessionView, taskId: string): string {
  const used = view.usage?.byTask[taskId];
  return used ? `${used.inputTokens}/${used.outputTokens}` : '-';
}

/**
 * Tokens per role with the USD estimate, and the budget when the session has one. A call is
 * logical (a plan, a verdict, repair turns included); the HTTP requests it took, the SDK's
 * retries included, are shown beside it.
 */
export function formatUsage(view: SessionView): string[] {
  const { usage } = view;
  const budget = view.session.config.budget;
  if (!usage) return [];
  const { total, httpRequests: http } = usage;
  const lines: string[] = [];
  if (total.calls > 0 || usage.failedCalls > 0 || http) {
    const unpriced = usage.unpricedCalls
      ? ` (without ${usage.unpricedCalls} call(s) to models missing from budget.prices)`
      : '';
    const failed = usage.failedCalls > 0 ? `, ${usage.failedCalls} failed` : '';
    const requests = http
      ? ` (${http.total} HTTP request(s)${http.failed > 0 ? `, ${http.failed} failed` : ''})`
      : '';
    lines.push(
      `tokens: ${total.inputTokens + total.outputTokens} (in ${total.inputTokens}, out ${total.outputTokens}) ` +
        `in ${total.calls} logical call(s)${failed}${requests}, ≈ ${usd(total.usd)}${unpriced}`,
    );
    const roles = new Set([...Object.keys(usage.byRole), ...Object.keys(http?.byRole ?? {})]);
    const rows = [...roles].map((role) => {
      const u = usage.byRole[role];
      return [
        `  ${role}`,
        String(u?.inputTokens ?? 0),
        String(u?.outputTokens ?? 0),
        String(u?.calls ?? 0),
        ...(http ? [String(http.byRole[role] ?? 0)] : []),
        usd(u?.usd ?? 0),
      ];
    });
    const header = ['  ROLE', 'IN', 'OUT', 'CALLS', ...(http ? ['HTTP'] : []), 'USD'];
    lines.push(...renderTable(header, rows));
  }
  const limits = [
    ...(budget.maxTokens !== undefined
      ? [`${total.inputTokens + total.outputTokens} of ${budget.maxTokens} tokens`]
      : []),
    ...(budget.maxUsd !== undefined ? [`${usd(total.usd)} of ${usd(budget.maxUsd)}`] : []),
  ];
  if (limits.length > 0) {
    const state = usage.exhausted
      ? `exhausted (${usage.exhausted.limit}), ${usage.denied} call(s) refused`
      : `${usage.reserved.tokens} tokens reserved by calls in flight`;
    lines.push(`budget: ${limits.join(', ')}; ${state}`);
  }
  return lines;
}

/**
 * The recent sessions (`orq status` without an id). `nothingRun`: REDIS_URL is not set and no
 * private Redis is kept in `privateRedis`, so the list is empty because nothing has run here.
 */
export function formatSessionList(
  sessions: readonly Session[],
  nothingRun?: { privateRedis: string },
): string {
  if (sessions.length === 0 && nothingRun) {
    return (
      `no sessions yet: nothing has run here (REDIS_URL is not set and ${nothingRun.privateRedis} does not exist). ` +
      'Run one with `orq run "<instruction>"`, set REDIS_URL to the Redis your roles use, ' +
      'or run orq in the directory of your `orq run` (or set ORQ_DATA_DIR)'
    );
  }
  if (sessions.length === 0) return 'no sessions yet: submit one with `orq submit "<instruction>"`';
  const rows = sessions.map((s) => [
    s.id,
    s.state,
    s.createdAt.slice(0, 19).replace('T', ' '),
    clip(oneLine(s.instruction), 60),
  ]);
  return renderTable(['SESSION', 'STATE', 'CREATED', 'INSTRUCTION'], rows).join('\n');
}

/**
 * The provider limits (issue 33) under `orq status`: per limit what its bucket holds now of
 * its per-minute rate, the slots in flight, and what it has counted (calls granted, waits for
 * quota, 429s), with the pause after a 429 when one runs.
 */
export function formatQuotas(quotas: readonly QuotaView[]): string {
  const rate = (left: number | undefined, perMinute: number | undefined) =>
    perMinute === undefined ? '-' : `${left ?? '?'} left of ${perMinute}/min`;
  const rows = quotas.map((q) => [
    q.name,
    rate(q.requestsLeft, q.requestsPerMinute),
    rate(q.tokensLeft, q.tokensPerMinute),
    q.maxConcurrent === undefined ? String(q.inFlight) : `${q.inFlight}/${q.maxConcurrent}`,
    String(q.granted),
    String(q.refused),
    String(q.throttled),
    q.pausedForMs > 0 ? `${(q.pausedForMs / 1000).toFixed(1)} s` : '-',
    String(q.waiting),
  ]);
  const lines = quotas.filter((q) => q.waiting > 0).flatMap((q) => formatQuotaLine(q));
  return [
    'Provider quotas',
    ...renderTable(
      ['LIMIT', 'REQUESTS', 'TOKENS', 'IN FLIGHT', 'CALLS', 'WAITS', '429s', 'PAUSED', 'IN LINE'],
      rows,
    ),
    ...lines,
  ].join('\n');
}

/** Sessions shown per tenant in a line; the rest are counted. */
const LINE_SESSIONS_SHOWN = 5;

/**
 * A limit's fair line (issue 46) by tenant: its calls waiting and the oldest wait, then its
 * sessions with their calls waiting and the place of their first.
 */
function formatQuotaLine(quota: QuotaView): string[] {
  const rows = quota.line.flatMap((t) => {
    const shown = t.sessions.slice(0, LINE_SESSIONS_SHOWN);
    const more = t.sessions.length - shown.length;
    const sessions = shown.map((s) => `${s.sessionId} ${s.waiting} (place ${s.place})`);
    if (more > 0) sessions.push(`${more} more`);
    return [
      [t.tenant, String(t.waiting), `${(t.oldestWaitMs / 1000).toFixed(1)} s`, sessions.join(', ')],
    ];
  });
  return [
    '',
    `In line for ${quota.name}`,
    ...renderTable(['TENANT', 'WAITING', 'OLDEST', 'SESSIONS: WAITING (FIRST PLACE)'], rows),
  ];
}

/** Tasks that need a person's eye come first when the live view has no room for all. */
const ATTENTION: readonly TaskState[] = [
  'RUNNING',
  'NEEDS_CONTINUATION',
  'BLOCKED',
  'READY',
  'DONE',
  'SKIPPED',
  'CANCELLED',
  'REPLACED_BY_REPLAN',
];

/** At most `max` tasks, the most relevant ones, kept in plan order. */
export function pickVisibleTasks(tasks: readonly Task[], max: number): Task[] {
  if (tasks.length <= max) return [...tasks];
  const rank = (t: Task) => ATTENTION.indexOf(t.state) + (t.replanPending ? -0.5 : 0);
  const chosen = new Set(
    tasks
      .map((task, index) => ({ task, index }))
      .sort((a, b) => rank(a.task) - rank(b.task) || a.index - b.index)
      .slice(0, Math.max(0, max))
      .map(({ task }) => task),
  );
  return tasks.filter((t) => chosen.has(t));
}

export interface LiveViewOptions {
  /** Terminal rows; the frame never uses more (log-update would cut its top). */
  rows?: number | undefined;
  /** Terminal columns; longer lines are clipped so a redraw erases exactly what it drew. */
  columns?: number | undefined;
  /**
   * The last frame, left on screen when following ends: its table has every column of the
   * status table, as the table `orq run` ends with when stdout is not a terminal.
   */
  final?: boolean;
}

export const LIVE_HISTORY_LINES = 5;

/**
 * The frame `orq watch` redraws in a terminal: the session's state, counts by task state, a
 * table of tasks with state, attempts and time (every status column in the final frame), what
 * running tasks are doing, and the last few history lines.
 */
export function formatLiveView(
  view: SessionView,
  recent: readonly HistoryEntry[],
  options: LiveViewOptions = {},
  now = Date.now(),
): string {
  const { session, tasks } = view;
  const rows = Math.max(options.rows || 24, 10);
  const columns = Math.max(options.columns || 80, 20);
  const head = sessionHeader(session);
  head.push(formatTaskCounts(tasks, view.queued));
  const tail = recent.slice(-LIVE_HISTORY_LINES).map(formatHistoryEntry);
  const doing = progressLines(view, now, LIVE_PROGRESS_LINES);
  const footer: string[] = [];
  if (session.state === 'BLOCKED') {
    footer.push(
      ...blockedReasons(tasks).slice(1, 4),
      `blocked: \`orq resume ${session.id}\` to go on`,
      ...(session.questions ?? []).map(
        (q) =>
          `${q.taskId} asks: ${clip(oneLine(q.question), 160)} (\`orq answer ${session.id} --task ${q.taskId} TEXT\`)`,
      ),
    );
  }

  // Room for task rows: the terminal minus header, blank lines, table header, history, footer,
  // and one spare line because log-update ends every frame with a newline.
  const fixed =
    head.length + 1 + 1 + doing.length + (tail.length ? tail.length + 2 : 0) + footer.length + 1;
  const room = Math.max(rows - fixed, 1);
  let visible = pickVisibleTasks(tasks, room);
  if (visible.length < tasks.length) visible = pickVisibleTasks(tasks, Math.max(room - 1, 0));
  const table = tasks.length
    ? taskTable(view, visible, now, { following: !options.final })
    : ['(no tasks yet: planning)'];
  if (visible.length < tasks.length) table.push(`… ${tasks.length - visible.length} more`);

  const lines = [
    ...head,
    '',
    ...table,
    ...doing,
    ...(tail.length ? ['', 'recent:', ...tail] : []),
    ...footer,
  ];
  return lines.map((line) => clipToWidth(line, columns - 1)).join('\n');
}

/**
 * What a person should know when a followed session ends other than COMPLETED. `resumeHere`:
 * no roles run after this command (`orq run`), so the resume it suggests runs them (`--run`).
 */
export function formatOutcomeNotice(
  view: SessionView,
  options: { resumeHere?: boolean } = {},
): string | undefined {
  const { session, tasks } = view;
  const here = options.resumeHere ? ' --run' : '';
  switch (session.state) {
    case 'BLOCKED': {
      const blocked = tasks
        .filter((t) => t.state === 'BLOCKED')
        // A reason's own final period would end up inside the parentheses: "(t2: failed.)."
        .map((t) =>
          t.blockedReason
            ? `${t.id}: ${clip(oneLine(t.blockedReason).replace(/\.+$/, ''), 200)}`
            : t.id,
        );
      const asked = (session.questions ?? []).map(
        (q) =>
          `. ${q.taskId} asks: ${clip(oneLine(q.question), 200)} (\`orq answer ${session.id} --task ${q.taskId} TEXT\`)`,
      );
      return `session ${session.id} is BLOCKED (${blocked.join(', ') || 'no task'})${asked.join('')}. Run \`orq resume ${session.id}${here}\` to retry, with --skip to go on without, or --note TEXT to continue with a note`;
    }
    case 'COMPLETED':
      return undefined;
    case 'AWAITING_APPROVAL': {
      const then = options.resumeHere
        ? `, then \`orq watch ${session.id} --run\` to go on here`
        : '';
      return `session ${session.id} waits for a person to approve its plan${session.wait ? ` (${session.wait.id}, ${session.wait.plan.tasks.length} task(s), score ${session.wait.score ?? 'n/a'})` : ''}. See it with \`orq status ${session.id}\`; answer with \`orq approve ${session.id}\`, \`orq reject ${session.id} --feedback TEXT\` or \`orq edit ${session.id} FILE\`${then}`;
    }
    case 'CANCELLED':
      return `session ${session.id} was CANCELLED`;
    case 'BUDGET_EXHAUSTED': {
      // The refusal's own hint names the command without --run: this notice gives it instead.
      const reason = session.failure?.reason.split(`. ${BUDGET_RESUME_HINT}`)[0];
      const why = reason ? `: ${reason}` : '';
      // Stopped while planning (no tasks yet), the resume plans again; after, it runs the rest.
      const goOn = tasks.length > 0 ? 'go on' : 'plan again';
      // Its questions stay open across the stop: answered once the budget is raised.
      const asked = (session.questions ?? []).map(
        (q) =>
          `; then answer ${q.taskId}'s question (\`orq answer ${session.id} --task ${q.taskId} TEXT\`)`,
      );
      return `session ${session.id} is BUDGET_EXHAUSTED${why}. Run \`orq resume ${session.id} --max-tokens N${here}\` (or --max-usd X) to ${goOn} with a higher limit${asked.join('')}`;
    }
    default: {
      // FAILED and any later end state: say why when the session knows.
      const why = session.failure ? `: ${session.failure.code}: ${session.failure.reason}` : '';
      return `session ${session.id} is ${session.state}${why}`;
    }
  }
}

/** The roles every session needs to move; the replanner only when a task is replanned. */
export const ROLES_A_SESSION_NEEDS: readonly Role[] = ['coordinator', 'planner', 'judge', 'worker'];

/**
 * Said before following a session on a Redis where some role it needs has no consumer: a
 * forgotten `orq start`, or pods under another prefix. Nothing when none is missing or the
 * server cannot tell (`consumers` empty).
 */
export function missingRolesNotice(
  sessionId: string,
  consumers: Partial<Record<Role, number>>,
  prefix: string,
): string | undefined {
  const missing = ROLES_A_SESSION_NEEDS.filter((role) => consumers[role] === 0);
  if (missing.length === 0) return undefined;
  const roles =
    missing.length > 1 ? `${missing.slice(0, -1).join(', ')} and ${missing.at(-1)}` : missing[0];
  return (
    `no process runs the ${roles} role${missing.length > 1 ? 's' : ''} on this Redis under the ` +
    `prefix "${prefix}", so session ${sessionId} waits (start pods with \`orq start\`). ` +
    `If your pods run, check that they use the same REDIS_URL and ORQ_PREFIX.`
  );
}

/**
 * `orq status`'s per-tenant lines: sessions with work, tasks in flight (dispatched, not judged)
 * and waiting (held back by their session's scheduling.maxTasksInFlight), and jobs waiting for
 * a provider quota. Empty when idle.
 */
export function formatTenantLoad(load: readonly TenantLoad[]): string {
  if (load.length === 0) return '';
  const width = Math.max(6, ...load.map((t) => t.tenant.length));
  // The cap's columns only when a tenant is capped: the table is as before otherwise.
  const capped = load.some((t) => t.maxTasksInFlight !== undefined);
  const capColumns = (t: TenantLoad) =>
    capped
      ? `  ${String(t.maxTasksInFlight ?? '-').padStart(3)}  ${String(t.tasksWaitingForSlot ?? '-').padStart(15)}`
      : '';
  const lines = load.map(
    (t) =>
      `${t.tenant.padEnd(width)}  ${String(t.sessions).padStart(8)}  ${String(t.tasksInFlight).padStart(9)}  ${String(t.tasksWaiting).padStart(7)}  ${String(t.jobsWaitingForQuota).padStart(17)}${capColumns(t)}`,
  );
  const header = `${'TENANT'.padEnd(width)}  SESSIONS  IN FLIGHT  WAITING  WAITING FOR QUOTA${capped ? '  CAP  WAITING FOR CAP' : ''}`;
  return [header, ...lines].join('\n');
}
