import type { Feedback } from '../../shared/domain/refinement.js';
import type {
  PlanBreakdown,
  PlannedTask,
  QualityJudgement,
  ReplanBreakdown,
} from '../../shared/domain/plan.js';
import type { Task, TaskJudgement, TaskResult, TokenUsage } from '../../shared/domain/task.js';
import { OrqError } from '../../shared/errors.js';
import {
  parseScenario,
  type Scenario,
  type ScenarioInput,
  type ScriptedFailure,
  type ScriptedRole,
} from '../../shared/config/scenario.js';
import type {
  CallContext,
  ExecuteRequest,
  ModelReply,
  PlanJudgeRequest,
  PlanRequest,
  ReplanRequest,
  RoleModels,
  TaskJudgeRequest,
} from './types.js';
import type { FinalJudgementInput } from '../../shared/rules/final-judgement.js';

/**
 * The built-in provider: deterministic rules, not an LLM. It lets the whole system run offline
 * (the demo of `orq run`) and lets tests replay exact sequences of plans, judgements, results
 * and failures from a scenario (see scenario.ts). Every reply is a pure function of the request
 * and the scenario: no clock, no randomness, no process-local counters.
 */
export const BUILTIN_MODELS_LABEL = 'builtin (deterministic rules, not an LLM)';

export interface BuiltinModelsOptions {
  /** Scripted replies; whatever it leaves out takes the default rules below. */
  scenario?: Scenario | ScenarioInput;
  /** Sleep before every call (abortable), for benchmarks. Wins over the scenario's latencyMs. */
  latencyMs?: number;
}

/** At most this many clause tasks; further clauses are folded into the last one. */
const MAX_CLAUSES = 8;

export function createBuiltinModels(options: BuiltinModelsOptions = {}): RoleModels {
  const scenario: Scenario = options.scenario ? parseScenario(options.scenario) : {};
  const latencyMs = options.latencyMs ?? scenario.latencyMs ?? 0;

  /** Latency, cancellation and scripted transient failures, in that order, before any reply. */
  async function beginCall(role: ScriptedRole, request: CallContext, call: CallIds): Promise<void> {
    await pause(latencyMs, request.signal, role, call);
    throwIfAborted(request.signal, role, call);
    throwScriptedTransientFailure(scenario, role, request, call);
  }

  return {
    label: BUILTIN_MODELS_LABEL,

    async plan(request: PlanRequest): Promise<ModelReply<PlanBreakdown>> {
      const call = { attempt: request.attempt };
      await beginCall('planner', request, call);
      const prompt = planPrompt(request);
      const scripted = entryAt(scenario.plans, request.attempt);
      const value = scripted
        ? unlessFailure(scripted, 'planner', call)
        : defaultPlan(request.instruction, request.feedback, request.attempt);
      return { value, usage: usageOf(prompt, JSON.stringify(value)) };
    },

    async judgePlan(request: PlanJudgeRequest): Promise<ModelReply<QualityJudgement>> {
      const call = { attempt: request.attempt };
      await beginCall('judge', request, call);
      const perAttempt = entryAt(scenario.planJudgements, request.attempt);
      // A list scripts each judge sample of the attempt (llm.judgeSamples, sampled-judge.ts).
      const scripted = Array.isArray(perAttempt)
        ? entryAt(perAttempt, request.sample ?? 0)
        : perAttempt;
      const value = scripted
        ? unlessFailure(scripted, 'judge', call)
        : defaultPlanJudgement(request.plan, request.requiredTerms);
      const prompt = [
        request.instruction,
        request.requiredTerms.join(', '),
        JSON.stringify(request.plan),
      ];
      return { value, usage: usageOf(prompt.join('\n'), JSON.stringify(value)) };
    },

    async execute(request: ExecuteRequest): Promise<TaskResult> {
      const call = { taskId: request.task.id, attempt: request.attempt };
      await beginCall('worker', request, call);
      const prompt = executePrompt(request);
      const result = defaultExecution(request, prompt, latencyMs);
      const scripted = entryAt(scenario.tasks?.[request.task.id]?.results, request.attempt - 1);
      if (!scripted) return result;
      const given = definedFields(unlessFailure(scripted, 'worker', call));
      const merged: TaskResult = { ...result, ...given };
      // A scripted output without scripted usage is counted like any other output.
      if (given.tokenUsage === undefined) merged.tokenUsage = usageOf(prompt, merged.output);
      return merged;
    },

    async judgeTask(request: TaskJudgeRequest): Promise<ModelReply<TaskJudgement>> {
      const call = { taskId: request.task.id, attempt: request.attempt };
      await beginCall('judge', request, call);
      if (request.beforeRun) {
        // Not met, unless the scenario says so: the rule set cannot tell what exists already.
        const scripted = scenario.tasks?.[request.task.id]?.beforeRun;
        const value: TaskJudgement = scripted
          ? unlessFailure(scripted, 'judge', call)
          : {
              success: false,
              shouldContinue: false,
              shouldReplan: false,
              alreadySatisfied: false,
              reason: 'the builtin provider runs every task it is asked about',
              missingRequirements: [],
            };
        return { value, usage: usageOf(taskText(request.task), JSON.stringify(value)) };
      }
      const perAttempt = entryAt(
        scenario.tasks?.[request.task.id]?.judgements,
        request.attempt - 1,
      );
      // A list scripts each opinion (llm.judgeSamples.confirmTaskVerdicts, sampled-judge.ts).
      const scripted = Array.isArray(perAttempt)
        ? entryAt(perAttempt, request.sample ?? 0)
        : perAttempt;
      const value = scripted
        ? unlessFailure(scripted, 'judge', call)
        : request.finalJudgement
          ? defaultFinalJudgement(request.finalJudgement)
          : defaultTaskJudgement(request.task, request.result);
      const prompt = [request.instruction, taskText(request.task), JSON.stringify(request.result)];
      return { value, usage: usageOf(prompt.join('\n'), JSON.stringify(value)) };
    },

    async replan(request: ReplanRequest): Promise<ModelReply<ReplanBreakdown>> {
      const call = { taskId: request.task.id, attempt: request.iteration };
      await beginCall('replanner', request, call);
      const scripted = scenario.tasks?.[request.task.id]?.replan;
      const value = scripted
        ? unlessFailure(scripted, 'replanner', call)
        : defaultReplan(request.task, request.judgement, request.iteration);
      const prompt = [
        request.instruction,
        taskText(request.task),
        request.result?.log ?? '',
        JSON.stringify(request.judgement),
      ];
      return { value, usage: usageOf(prompt.join('\n'), JSON.stringify(value)) };
    },
  };
}

// ---------------------------------------------------------------------------------------------
// Scenario plumbing

/** The ids a call is about, for failure matching and error details. */
interface CallIds {
  taskId?: string;
  /** Plan attempt, execution attempt, or replan iteration. */
  attempt: number;
}

/** Entry `index` of a scripted array; past the end, the last entry; nothing when unscripted. */
function entryAt<T>(entries: readonly T[] | undefined, index: number): T | undefined {
  if (!entries || entries.length === 0) return undefined;
  return entries[Math.min(Math.max(index, 0), entries.length - 1)];
}

/**
 * `{ error }` and nothing else is a scripted failure. The exact-keys test matters for task
 * results, which have an `error` field of their own: `{ output: '', error: 'x' }` is a result
 * that reports an error, `{ error: 'x' }` a call that throws (scenario.ts parses them so).
 */
function isScriptedFailure(entry: object): entry is ScriptedFailure {
  const keys = Object.keys(entry);
  return keys.length === 1 && keys[0] === 'error';
}

function unlessFailure<T extends object>(
  entry: T | ScriptedFailure,
  role: ScriptedRole,
  call: CallIds,
): T {
  // A copy, so a caller that edits the reply cannot change what the next call returns.
  if (!isScriptedFailure(entry)) return structuredClone(entry as T);
  throw new OrqError('LLM_CALL_FAILED', `Scripted ${role} error: ${entry.error}`, {
    details: { role, ...call, scripted: true, transient: false },
  });
}

/**
 * The queue job's attempt number (CallContext.jobAttempt, from BullMQ `attemptsMade`: 0 on the
 * first delivery). Scripted transient failures are counted from it rather than from a counter in
 * this process, because several processes may replay the same scenario and a retry may land on
 * another pod: the n-th delivery of a job fails or succeeds the same way wherever it runs. A
 * caller that does not pass it counts as the first delivery, so a matching rule fails every call.
 */
function jobAttemptOf(request: CallContext): number {
  const value = request.jobAttempt;
  return typeof value === 'number' && Number.isInteger(value) && value >= 0 ? value : 0;
}

function throwScriptedTransientFailure(
  scenario: Scenario,
  role: ScriptedRole,
  request: CallContext,
  call: CallIds,
): void {
  const jobAttempt = jobAttemptOf(request);
  const rule = (scenario.failures ?? []).find(
    (r) =>
      r.role === role &&
      (r.taskId === undefined || r.taskId === call.taskId) &&
      (r.attempt === undefined || r.attempt === call.attempt) &&
      jobAttempt < r.times,
  );
  if (!rule) return;
  throw new OrqError(
    'LLM_CALL_FAILED',
    `Scripted transient ${role} failure (job attempt ${jobAttempt}; the first ${rule.times} fail)`,
    { details: { role, ...call, jobAttempt, times: rule.times, scripted: true, transient: true } },
  );
}

function definedFields<T extends object>(value: T): Partial<T> {
  return Object.fromEntries(Object.entries(value).filter(([, v]) => v !== undefined)) as Partial<T>;
}

// ---------------------------------------------------------------------------------------------
// Latency and cancellation

function abortError(signal: AbortSignal, role: ScriptedRole, call: CallIds): OrqError {
  const error = new OrqError('LLM_CALL_FAILED', `The ${role} call was aborted`, {
    details: { role, ...call, aborted: true },
    cause: signal.reason,
  });
  // Callers that test `error.name === 'AbortError'` (as for fetch) treat it as a cancellation.
  error.name = 'AbortError';
  return error;
}

function throwIfAborted(signal: AbortSignal | undefined, role: ScriptedRole, call: CallIds): void {
  if (signal?.aborted) throw abortError(signal, role, call);
}

function pause(
  ms: number,
  signal: AbortSignal | undefined,
  role: ScriptedRole,
  call: CallIds,
): Promise<void> {
  throwIfAborted(signal, role, call);
  if (ms <= 0) return Promise.resolve();
  return new Promise((resolve, reject) => {
    const onAbort = () => {
      clearTimeout(timer);
      reject(abortError(signal as AbortSignal, role, call));
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

// ---------------------------------------------------------------------------------------------
// Default rules

/** A rough, deterministic token count: one token per four characters. */
function usageOf(input: string, output: string): TokenUsage {
  return { inputTokens: Math.ceil(input.length / 4), outputTokens: Math.ceil(output.length / 4) };
}

const JAPANESE = /[\p{Script=Hiragana}\p{Script=Katakana}\p{Script=Han}]/u;

/**
 * Clause separators. Japanese: と (only after a non-hiragana character, so the particle in
 * 認証機能とバリデーション splits but こと or ところ do not), 、, 。, および, そして. English: comma,
 * semicolon, newline, " and ", " then ". The group captures the separator, so "then" and そして
 * can mark the next clause as coming after the previous one.
 */
const SEPARATOR =
  /(および|そして|(?<=[^\p{Script=Hiragana}\s])と|[、。,;\n]|\s+and\s+|\s+then\s+)/iu;
const SEQUENTIAL_SEPARATOR = /^(then|そして)$/i;
const LEADING_CONNECTIVE = /^(and|then)\s+/i;

export interface Clause {
  text: string;
  /** Introduced by "then" or そして: comes after the clause before it. */
  sequential: boolean;
}

/** The clauses of an instruction, in order, without duplicates, at most 8. */
export function splitInstructionIntoClauses(instruction: string): Clause[] {
  const parts = instruction.split(SEPARATOR);
  const clauses: Clause[] = [];
  const seen = new Set<string>();
  let sequential = false;
  for (let i = 0; i < parts.length; i++) {
    const part = parts[i] ?? '';
    if (i % 2 === 1) {
      // A separator; a run of them (", and then") keeps the sequential mark of any of them.
      sequential ||= SEQUENTIAL_SEPARATOR.test(part.trim());
      continue;
    }
    let text = part.trim();
    while (LEADING_CONNECTIVE.test(text)) {
      sequential ||= /^then\b/i.test(text);
      text = text.replace(LEADING_CONNECTIVE, '').trim();
    }
    text = text.replace(/[.!?。！？]+$/u, '').trim();
    if (text === '') continue;
    const key = text.toLowerCase();
    if (!seen.has(key)) {
      seen.add(key);
      clauses.push({ text, sequential: sequential && clauses.length > 0 });
    }
    sequential = false;
  }

  if (clauses.length === 0) {
    const whole = instruction.trim();
    return [{ text: whole === '' ? 'Carry out the instruction' : whole, sequential: false }];
  }
  if (clauses.length <= MAX_CLAUSES) return clauses;
  const joiner = JAPANESE.test(instruction) ? '、' : ', ';
  const tail = clauses.slice(MAX_CLAUSES - 1);
  const last: Clause = {
    text: tail.map((c) => c.text).join(joiner),
    sequential: tail[0]?.sequential ?? false,
  };
  return [...clauses.slice(0, MAX_CLAUSES - 1), last];
}

function planPrompt(request: PlanRequest): string {
  const feedback = request.feedback
    ? [...request.feedback.issues, ...request.feedback.suggestions]
    : [];
  return [request.instruction, request.requiredTerms.join(', '), ...feedback].join('\n');
}

/**
 * One task per clause, plus an integration task depending on all of them when there are two or
 * more. Every text quotes the clause or the whole instruction verbatim, so the terms of seed 002
 * survive. With feedback (a replan) the same tasks come back with each issue and suggestion
 * written into the context of the task it names or resembles most.
 */
function defaultPlan(
  instruction: string,
  feedback: Feedback | undefined,
  attempt: number,
): PlanBreakdown {
  const japanese = JAPANESE.test(instruction);
  const clauses = splitInstructionIntoClauses(instruction);
  const n = clauses.length;
  const whole = instruction.trim();

  const tasks: PlannedTask[] = clauses.map((clause, i) => ({
    id: `t${i + 1}`,
    title: clause.text,
    acceptance: japanese
      ? `「${clause.text}」が完了し、その結果が出力に記載されている。`
      : `"${clause.text}" is done, and the output describes the result.`,
    context: japanese
      ? `指示「${whole}」の${n}個の部分のうち${i + 1}番目。`
      : `Part ${i + 1} of ${n} of the instruction: "${whole}"`,
    scopePaths: [],
    dependencies: clause.sequential && i > 0 ? [`t${i}`] : [],
  }));

  if (n >= 2) {
    const ids = tasks.map((t) => t.id);
    const titles = tasks.map((t) => t.title);
    tasks.push({
      id: `t${n + 1}`,
      title: 'Integrate and verify',
      acceptance: japanese
        ? `${titles.join('、')}の結果が統合され、指示「${whole}」を満たしていることが確認されている。`
        : `The results of ${titles.map((t) => `"${t}"`).join(', ')} work together and fulfil the instruction: "${whole}"`,
      context: `Combines the results of ${ids.join(', ')} and checks them against the whole instruction: "${whole}"`,
      scopePaths: [],
      dependencies: ids,
    });
  }

  const items = feedback
    ? [
        ...feedback.issues.map((text) => ({ text, line: `Judge issue to address: ${text}` })),
        ...feedback.suggestions.map((text) => ({
          text,
          line: `Judge suggestion to consider: ${text}`,
        })),
      ]
    : [];
  for (const { text, line } of items) {
    const target = tasks[bestMatchingTask(text, tasks)];
    if (target) target.context = `${target.context}\n${line}`;
  }

  const counted = n >= 2 ? `${n} tasks and an integration task` : '1 task';
  const summary =
    items.length > 0
      ? `${counted} from the instruction, revised (attempt ${attempt}) with ${items.length} feedback item(s)`
      : `${counted} from the instruction`;
  return { summary, tasks };
}

/** Index of the task a feedback text names or resembles most; the last task when none. */
function bestMatchingTask(text: string, tasks: readonly PlannedTask[]): number {
  const words = tokens(text);
  const lower = text.toLowerCase();
  let best = tasks.length - 1;
  let bestScore = 0;
  tasks.forEach((task, index) => {
    let score = 0;
    if (mentionsId(text, task.id)) score += 100;
    if (lower.includes(task.title.toLowerCase())) score += 50;
    const own = tokens(`${task.title} ${task.acceptance}`);
    for (const word of words) if (own.has(word)) score += 1;
    if (score > bestScore) {
      best = index;
      bestScore = score;
    }
  });
  return best;
}

function mentionsId(text: string, id: string): boolean {
  const escaped = id.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
  return new RegExp(`(^|[^A-Za-z0-9_.:-])${escaped}($|[^A-Za-z0-9_:-])`, 'i').test(text);
}

/** Latin words of 3+ letters, and character pairs of Japanese runs (which have no spaces). */
function tokens(text: string): Set<string> {
  const out = new Set<string>();
  for (const word of text.toLowerCase().match(/[\p{L}\p{N}]+/gu) ?? []) {
    if (JAPANESE.test(word)) {
      const chars = [...word];
      for (let i = 0; i + 1 < chars.length; i++) out.add(`${chars[i]}${chars[i + 1]}`);
    } else if (word.length >= 3) {
      out.add(word);
    }
  }
  return out;
}

/**
 * Half the score for a plan at all, half for the share of required terms its tasks mention
 * (case-insensitive), and 10 off when a task has no context.
 */
function defaultPlanJudgement(
  plan: PlanBreakdown,
  requiredTerms: readonly string[],
): QualityJudgement {
  const text = plan.tasks
    .map((t) => [t.title, t.acceptance, t.context ?? ''].join('\n'))
    .join('\n')
    .toLowerCase();
  const terms = [...new Set(requiredTerms.map((t) => t.trim()).filter((t) => t !== ''))];
  const missing = terms.filter((term) => !text.includes(term.toLowerCase()));
  const share = terms.length === 0 ? 1 : (terms.length - missing.length) / terms.length;
  const withoutContext = plan.tasks.filter((t) => (t.context ?? '').trim() === '').map((t) => t.id);

  let score = Math.round(50 + 50 * share);
  if (withoutContext.length > 0) score -= 10;
  const issues = missing.map((term) => `Required term "${term}" does not appear in any task`);
  if (withoutContext.length > 0) issues.push(`Tasks without context: ${withoutContext.join(', ')}`);
  score = Math.max(0, Math.min(100, score));
  return { score, isAcceptable: score >= 70, issues, suggestions: [] };
}

function taskText(task: Task): string {
  return [task.title, task.acceptance, task.context].join('\n');
}

function executePrompt(request: ExecuteRequest): string {
  return [
    request.instruction,
    taskText(request.task),
    request.feedback ?? '',
    ...request.dependencyResults.map((d) => d.output),
  ].join('\n');
}

function firstLine(text: string): string {
  return text.split('\n', 1)[0] ?? '';
}

function defaultExecution(request: ExecuteRequest, prompt: string, latencyMs: number): TaskResult {
  const { task, attempt, dependencyResults, feedback } = request;
  const output = [
    `Done: ${task.title}`,
    ...dependencyResults.map((d) => `Used ${d.taskId} (${d.title}): ${firstLine(d.output)}`),
  ].join('\n');
  const log = [
    `builtin worker: attempt ${attempt} of task ${task.id} "${task.title}"`,
    dependencyResults.length > 0
      ? `read ${dependencyResults.length} dependency result(s): ${dependencyResults.map((d) => d.taskId).join(', ')}`
      : 'no dependency results to read',
    ...(feedback ? [`applied feedback: ${feedback}`] : []),
    `checked acceptance: ${task.acceptance || '(none given)'}`,
    `wrote ${output.length} characters of output`,
  ].join('\n');
  return {
    output,
    log,
    artifacts: [],
    tokenUsage: usageOf(prompt, output),
    durationMs: latencyMs,
  };
}

/** Success when the execution reported no error and has output; otherwise continue with why. */
function defaultTaskJudgement(task: Task, result: TaskResult): TaskJudgement {
  if (result.error === undefined && result.output.trim() !== '') {
    return {
      success: true,
      shouldContinue: false,
      shouldReplan: false,
      reason: `Task ${task.id} produced output and reported no error`,
      missingRequirements: [],
    };
  }
  return {
    success: false,
    shouldContinue: true,
    shouldReplan: false,
    reason:
      result.error !== undefined
        ? `Task ${task.id} reported an error: ${result.error}`
        : `Task ${task.id} produced no output`,
    missingRequirements: task.acceptance ? [task.acceptance] : [],
  };
}

/**
 * The final judgement (issue 47): done when no blocking check failed on the result branch; else
 * each failing check is missing work. The rule set cannot read the diff against the instruction.
 */
function defaultFinalJudgement(final: FinalJudgementInput): TaskJudgement {
  const failed = final.checks.filter((c) => !c.passed && c.mode !== 'warn');
  if (failed.length === 0) {
    return {
      success: true,
      shouldContinue: false,
      shouldReplan: false,
      reason: `${final.branch} holds ${final.tasks.length} task(s) and no blocking check failed`,
      missingRequirements: [],
    };
  }
  return {
    success: false,
    shouldContinue: false,
    shouldReplan: true,
    reason: `check(s) ${failed.map((c) => c.name).join(', ')} fail on ${final.branch}`,
    missingRequirements: failed.map((c) =>
      `Make the check ${c.name} pass on the merged tree: ${(c.output ?? '').trim().split('\n').at(-1) ?? ''}`.trim(),
    ),
  };
}

/** Seed 001: split the task into a preparation step and the task itself, in that order. */
function defaultReplan(task: Task, judgement: TaskJudgement, iteration: number): ReplanBreakdown {
  const acceptance = task.acceptance.trim() || `"${task.title}" is done`;
  const why = judgement.reason || 'no reason given';
  const missing =
    judgement.missingRequirements.length > 0
      ? `\nMissing according to the judge: ${judgement.missingRequirements.join('; ')}`
      : '';
  const shared = {
    scopePaths: task.scopePaths,
    ...(task.executor === undefined ? {} : { executor: task.executor }),
  };
  const prepareId = `${task.id}-a`;
  return {
    reason: `Split ${task.id} into preparation and execution (replan iteration ${iteration}): ${why}`,
    tasks: [
      {
        id: prepareId,
        title: `Investigate and prepare: ${task.title}`,
        acceptance: `What "${task.title}" needs is understood and ready, towards: ${acceptance}`,
        context:
          `${task.context}\nThe judge asked for a replan of ${task.id}: ${why}${missing}`.trim(),
        dependencies: [],
        ...shared,
      },
      {
        id: `${task.id}-b`,
        title: task.title,
        acceptance,
        context: `${task.context}\nBuilds on the preparation in ${prepareId}.`.trim(),
        dependencies: [prepareId],
        ...shared,
      },
    ],
  };
}
