import type { LlmConfig, ResultConfig } from '../config/schema.js';
import { builtinUse } from '../config/builtin-roles.js';
import { OrqError } from '../errors.js';
import type { ResultGap, ResultOutput, SessionResult } from '../domain/result.js';
import type { FinalVerdict, IntegrationOutcome } from '../domain/integration.js';
import type { Session, SessionState } from '../domain/session.js';
import { FINISHED_TASK_STATES, type Task } from '../domain/task.js';

export type ResultSession = Pick<Session, 'id' | 'state' | 'failure'> & {
  config: { result: ResultConfig; llm: LlmConfig };
  integration?: Session['integration'];
};

type ResultTask = Pick<
  Task,
  'id' | 'title' | 'state' | 'dependencies' | 'result' | 'judgement' | 'blockedReason'
> & { replanningInfo?: Pick<NonNullable<Task['replanningInfo']>, 'replacedBy'> | undefined };

/**
 * A session's result from its tasks (in session order), as a pure function.
 *
 * With result.tasks `final` (the default) the result is made of the final tasks: those no
 * other task depends on. A task REPLACED_BY_REPLAN is not one; its subtasks stand where it
 * stood (the replan rewires its dependents to them; a dependency still naming it is read as
 * naming its subtasks). A final task that is DONE gives its output. One that is not (SKIPPED,
 * CANCELLED, or unfinished in a session that stopped short or still runs) is listed as missing,
 * and its branch is represented by the nearest DONE tasks before it, found through its
 * dependencies: the last work done on that branch, which the user kept going without (skip)
 * or which is what there is so far. With `done`, every DONE task gives its output and every
 * other task still standing is missing.
 *
 * `complete` holds only for a COMPLETED session with nothing missing; `notes` say in plain
 * words why a result is partial. A session with no tasks has an empty result with a note.
 */
export function deriveSessionResult(
  session: ResultSession,
  tasks: readonly ResultTask[],
): SessionResult {
  const settings = session.config.result;
  const standing = tasks.filter((t) => t.state !== 'REPLACED_BY_REPLAN');
  const { outputs, missing } =
    settings.tasks === 'final' ? finalTasks(tasks, standing) : doneTasks(standing);
  const { text, textTruncated } = resultText(outputs, settings.maxTextLength);
  const notes = [
    ...stateNotes(session, standing),
    ...gapNotes(outputs, missing),
    ...(textTruncated
      ? [
          `The text is cut at ${settings.maxTextLength} characters (result.maxTextLength); the outputs hold all of it.`,
        ]
      : []),
  ];
  return {
    sessionId: session.id,
    state: session.state,
    selection: settings.tasks,
    complete: session.state === 'COMPLETED' && missing.length === 0,
    outputs,
    missing,
    notes,
    text,
    textTruncated,
    // Who made the outputs: a newcomer must not take the builtin provider's for a model's.
    ...builtinUse(session.config),
    ...(session.integration?.outcome ? { integration: session.integration.outcome } : {}),
    ...(session.integration?.verdict ? { finalJudgement: session.integration.verdict } : {}),
  };
}

const gapOf = (task: ResultTask): ResultGap => {
  const judged = task.judgement && !task.judgement.success ? task.judgement.reason : undefined;
  const reason = task.blockedReason ?? (judged || undefined);
  return {
    taskId: task.id,
    title: task.title,
    state: task.state,
    ...(reason !== undefined ? { reason } : {}),
  };
};

const outputOf = (task: ResultTask, standsInFor?: readonly string[]): ResultOutput => ({
  taskId: task.id,
  title: task.title,
  output: task.result?.output ?? '',
  artifacts: task.result?.artifacts ?? [],
  ...(standsInFor ? { standsInFor: [...standsInFor] } : {}),
});

function doneTasks(standing: readonly ResultTask[]) {
  return {
    outputs: standing.filter((t) => t.state === 'DONE').map((t) => outputOf(t)),
    missing: standing.filter((t) => t.state !== 'DONE').map(gapOf),
  };
}

function finalTasks(tasks: readonly ResultTask[], standing: readonly ResultTask[]) {
  const byId = new Map(tasks.map((t) => [t.id, t]));
  /** A task's dependencies, a replaced one read as its subtasks (recursively), known ids only. */
  const dependenciesOf = (task: ResultTask): ResultTask[] => {
    const found: ResultTask[] = [];
    const seen = new Set<string>();
    const visit = (id: string) => {
      const dep = byId.get(id);
      if (!dep || seen.has(id)) return;
      seen.add(id);
      if (dep.state === 'REPLACED_BY_REPLAN') {
        for (const sub of dep.replanningInfo?.replacedBy ?? []) visit(sub);
      } else {
        found.push(dep);
      }
    };
    for (const id of task.dependencies) visit(id);
    return found;
  };

  const dependedOn = new Set(standing.flatMap((t) => dependenciesOf(t).map((d) => d.id)));
  const finals = standing.filter((t) => !dependedOn.has(t.id));

  // For each final task without an output, the nearest DONE tasks on each branch before it.
  const standIns = new Map<string, string[]>();
  for (const final of finals) {
    if (final.state === 'DONE') continue;
    const seen = new Set<string>([final.id]);
    const queue = dependenciesOf(final);
    for (let next = 0; next < queue.length; next += 1) {
      const task = queue[next] as ResultTask;
      if (seen.has(task.id)) continue;
      seen.add(task.id);
      if (task.state === 'DONE') {
        standIns.set(task.id, [...(standIns.get(task.id) ?? []), final.id]);
      } else {
        queue.push(...dependenciesOf(task));
      }
    }
  }

  const isFinal = new Set(finals.map((t) => t.id));
  return {
    // In session order: a final task's own output, or a done task standing in for some.
    outputs: standing.flatMap((t) => {
      if (isFinal.has(t.id) && t.state === 'DONE') return [outputOf(t)];
      const forIds = standIns.get(t.id);
      return forIds ? [outputOf(t, forIds)] : [];
    }),
    missing: finals.filter((t) => t.state !== 'DONE').map(gapOf),
  };
}

/** The outputs as one text: the output alone, or a section per task; cut at `max`. */
function resultText(outputs: readonly ResultOutput[], max: number | undefined) {
  const full =
    outputs.length === 1
      ? (outputs[0] as ResultOutput).output
      : outputs.map((o) => `## ${o.taskId}: ${o.title}\n\n${o.output.trimEnd()}`).join('\n\n');
  if (max === undefined || full.length <= max) return { text: full, textTruncated: false };
  // Not between the two halves of a surrogate pair: the cut text stays valid UTF-16.
  const code = full.charCodeAt(max - 1);
  const end = code >= 0xd800 && code <= 0xdbff ? max - 1 : max;
  return {
    text: `${full.slice(0, end)}\n[… ${full.length - end} more characters]`,
    textTruncated: true,
  };
}

const list = (ids: readonly string[]) =>
  ids.length > 1 ? `${ids.slice(0, -1).join(', ')} and ${ids.at(-1)}` : (ids[0] ?? '');

/** What the session's state means for its result. */
function stateNotes(session: ResultSession, standing: readonly ResultTask[]): string[] {
  const finished = standing.filter((t) => FINISHED_TASK_STATES.includes(t.state)).length;
  const progress = `${finished} of ${standing.length} task${standing.length === 1 ? '' : 's'} finished`;
  // The stored reason may end with its own period.
  const why = session.failure ? `: ${session.failure.reason.trim().replace(/\.+$/, '')}.` : '.';
  switch (session.state) {
    case 'COMPLETED':
      return [];
    case 'PLANNING':
      return [
        standing.length === 0
          ? `Session ${session.id} is still planning: no task has run yet.`
          : `Session ${session.id} is planning again (${progress}): the result may still change.`,
      ];
    case 'RUNNING':
      return [`Session ${session.id} is still running (${progress}): the result may still change.`];
    case 'INTEGRATING':
      return [
        `Session ${session.id} is merging its task branches into one result branch (${progress}).`,
      ];
    case 'AWAITING_APPROVAL':
      return [
        `Session ${session.id} waits for a person to approve its plan (orq approve ${session.id}): no task has run yet.`,
      ];
    case 'BLOCKED': {
      const blocked = standing.filter((t) => t.state === 'BLOCKED').map((t) => t.id);
      return [
        `Session ${session.id} is BLOCKED (${progress}): ${list(blocked) || 'a task'} wait${blocked.length === 1 ? 's' : ''} for a resume.`,
      ];
    }
    case 'FAILED':
      return [
        standing.length === 0
          ? `Session ${session.id} FAILED before any task ran${why}`
          : `Session ${session.id} FAILED (${progress})${why}`,
      ];
    case 'CANCELLED':
      return [`Session ${session.id} was CANCELLED (${progress}).`];
    case 'BUDGET_EXHAUSTED':
      return [`Session ${session.id} stopped at its budget (${progress})${why}`];
  }
}

/** Which result tasks gave no output, and which done tasks stand in for them. */
function gapNotes(outputs: readonly ResultOutput[], missing: readonly ResultGap[]): string[] {
  if (missing.length === 0) return [];
  const gaps = missing.map((g) => `${g.taskId} (${g.state})`);
  const standIns = outputs.filter((o) => o.standsInFor).map((o) => o.taskId);
  return [
    `No output from ${list(gaps)}${
      standIns.length > 0
        ? `: the result holds the nearest done task${standIns.length === 1 ? '' : 's'} before, ${list(standIns)}.`
        : '.'
    }`,
  ];
}

/**
 * A session planning, running or integrating may still change its result: it is given only when
 * asked for.
 */
export const resultIsFinal = (state: SessionState): boolean =>
  state !== 'PLANNING' && state !== 'RUNNING' && state !== 'INTEGRATING';

/** The refusal of a result that is not final yet, saying how far the session is. */
export function resultNotFinal(result: SessionResult): OrqError {
  const id = result.sessionId;
  return new OrqError(
    'INVALID_STATE',
    `session ${id} is ${result.state}: its result is not final yet (${result.outputs.length} output${result.outputs.length === 1 ? '' : 's'} so far)`,
    {
      hint: `Wait until it ends (orq watch ${id}, client.wait), or ask for the result so far: orq result ${id} --partial, client.result(id, { partial: true }), GET /sessions/${id}/result?partial=true.`,
      details: { sessionId: id, state: result.state },
    },
  );
}

/**
 * Where a session's integration stands, in one line, while it is under way (orq status, the
 * session view), a resolution or fix task blocked included; undefined when none is.
 */
export function integrationPhaseLine(session: {
  id: string;
  state: string;
  integration?:
    | {
        round: number;
        phase: string;
        outcome?: { commit?: string | undefined } | undefined;
        verdict?: { missing: string[] } | undefined;
      }
    | undefined;
}): string | undefined {
  const integration = session.integration;
  const underWay = ['INTEGRATING', 'RUNNING', 'BLOCKED'].includes(session.state);
  if (!integration || !underWay) return undefined;
  const branch = `orq/${session.id}/result`;
  const round = `round ${integration.round}`;
  switch (integration.phase) {
    case 'merging':
      return session.state === 'INTEGRATING'
        ? `integrating (${round}): merging the task branches into ${branch} and running the checks there`
        : undefined;
    case 'judging':
      return `final judgement (${round}): the judge reviews ${branch} at ${(integration.outcome?.commit ?? '').slice(0, 12)}`;
    case 'resolving':
      return `resolving conflicts: a resolution task ${session.state === 'BLOCKED' ? 'waits for a resume' : 'runs'}; then integration ${round}`;
    case 'publishing':
      return `publishing (${round}): the final judge found ${branch} done; pushing it and opening its pull request`;
    case 'fixing':
      return `fixing: tasks for what the final judge found missing (${integration.verdict?.missing.length ?? 0} item(s)) ${session.state === 'BLOCKED' ? 'wait for a resume' : 'run'}; then integration ${round}`;
    default:
      return undefined;
  }
}

/**
 * Where the session's git work ended up, a line each: the result branch and its commit, the
 * diff stat's summary, each check, or the conflict that stopped the merge. None without one.
 */
export function integrationLines(
  outcome: IntegrationOutcome | undefined,
  verdict?: FinalVerdict,
): string[] {
  if (!outcome) return [];
  const judged = verdict
    ? [
        `final judgement (round ${verdict.round}): ${verdict.done ? `done, ${verdict.reason}` : `missing ${verdict.missing.join('; ')}`}`,
      ]
    : [];
  if (outcome.status === 'conflict' || !outcome.commit) {
    const c = outcome.conflict;
    return [
      `result branch ${outcome.branch}: not written, ${c ? `${c.taskId} conflicts${c.withTaskId ? ` with ${c.withTaskId}` : ''} in ${c.files.join(', ')}` : 'the merge stopped on a conflict'}`,
    ];
  }
  const stat = outcome.diffStat.split('\n').at(-1)?.trim() || 'no changes';
  return [
    `result branch ${outcome.branch} at ${outcome.commit.slice(0, 12)} (${outcome.strategy} of ${outcome.tasks.length} task${outcome.tasks.length === 1 ? '' : 's'}): ${stat}`,
    ...(outcome.pullRequest
      ? [
          `${outcome.pullRequest.provider === 'github' ? 'pull' : 'merge'} request #${outcome.pullRequest.number}: ${outcome.pullRequest.url}`,
        ]
      : []),
    ...outcome.checks.map(
      (c) =>
        `check ${c.name} (${c.mode}) on the result: ${c.passed ? 'passed' : `FAILED, exit code ${c.exitCode ?? 'none'}`}`,
    ),
    ...judged,
  ];
}
