import { readFileSync } from 'node:fs';
import type { PlanBreakdown } from '../../shared/domain/plan.js';
import type { ExecutorPolicy } from '../../shared/rules/executor-choice.js';
import type {
  DependencyResult,
  ExecuteRequest,
  PlanJudgeRequest,
  PlanRequest,
  ReplanRequest,
  TaskJudgeRequest,
} from './types.js';

/**
 * The prompts of each role, rendered from the readable templates in ./prompts/*.md (shipped
 * next to the compiled module by scripts/copy-assets.mjs). A template has a system and a user
 * part, marked `<!-- system -->` and `<!-- user -->`; `{{name}}` inserts a value, and
 * `{{#name}}…{{/name}}` (`{{^name}}…{{/name}}`) keeps its text only when the value is (is not)
 * non-empty. Values are inserted once, after the sections: text from a user or a model is never
 * read as template syntax. Prompts hold no session id or time, so the same request renders the
 * same prompt in every run (record/replay depends on it).
 */

export const PROMPT_TEMPLATES = [
  'planner',
  'plan-judge',
  'executor',
  'task-judge',
  'task-check',
  'result-judge',
  'replanner',
  'output-format',
  'repair',
] as const;
export type PromptTemplateName = (typeof PROMPT_TEMPLATES)[number];

export interface Prompt {
  system: string;
  user: string;
}

export type TemplateValues = Record<string, string | boolean>;

const TEMPLATE_DIR = new URL('./prompts/', import.meta.url);
const cache = new Map<PromptTemplateName, string>();

/** The text of a template file (read once per process). */
export function templateText(name: PromptTemplateName): string {
  let text = cache.get(name);
  if (text === undefined) {
    text = readFileSync(new URL(`${name}.md`, TEMPLATE_DIR), 'utf8');
    cache.set(name, text);
  }
  return text;
}

const SECTION = /\{\{([#^])(\w+)\}\}([\s\S]*?)\{\{\/\2\}\}/g;
const VARIABLE = /\{\{(\w+)\}\}/g;

const truthy = (value: string | boolean | undefined): boolean =>
  typeof value === 'string' ? value.trim() !== '' : value === true;

/** Fills a template; a placeholder without a value is a bug in orq, reported by name. */
export function renderTemplate(
  template: string,
  values: TemplateValues,
  name = 'template',
): string {
  const sectioned = template.replace(SECTION, (_all, kind: string, key: string, inner: string) => {
    if (!(key in values)) throw new Error(`prompt ${name}: no value for section {{${kind}${key}}}`);
    return truthy(values[key]) === (kind === '#') ? inner : '';
  });
  const filled = sectioned.replace(VARIABLE, (_all, key: string) => {
    const value = values[key];
    if (value === undefined) throw new Error(`prompt ${name}: no value for {{${key}}}`);
    return String(value);
  });
  return filled.replace(/\n{3,}/g, '\n\n').trim();
}

/** Splits a role template at its `<!-- system -->` and `<!-- user -->` markers and fills both. */
export function renderPrompt(name: PromptTemplateName, values: TemplateValues): Prompt {
  const text = templateText(name);
  const system = text.indexOf('<!-- system -->');
  const user = text.indexOf('<!-- user -->');
  if (system === -1 || user < system) {
    throw new Error(`prompt ${name}: needs <!-- system --> followed by <!-- user -->`);
  }
  return {
    system: renderTemplate(text.slice(system + '<!-- system -->'.length, user), values, name),
    user: renderTemplate(text.slice(user + '<!-- user -->'.length), values, name),
  };
}

// ---------------------------------------------------------------------------------------------
// Value formatting

const NONE = '(none)';

export const bulletList = (items: readonly string[]): string =>
  items.length === 0 ? NONE : items.map((item) => `- ${item}`).join('\n');

const termList = (terms: readonly string[]): string =>
  terms.length === 0 ? NONE : terms.map((t) => `「${t}」`).join(', ');

const pathList = (paths: readonly string[]): string => paths.map((p) => `\`${p}\``).join(', ');

/** The start of a long text, with a note of how much was left out. */
export function clipHead(text: string, max: number): string {
  return text.length <= max
    ? text
    : `${text.slice(0, max)}\n[… ${text.length - max} more characters left out]`;
}

/** The end of a long text (a log's last lines matter most), with a note of what was left out. */
export function clipTail(text: string, max: number): string {
  return text.length <= max
    ? text
    : `[… ${text.length - max} earlier characters left out]\n${text.slice(-max)}`;
}

const LIMITS = { dependencyOutput: 6000, output: 20_000, log: 8000, replanOutput: 4000 };

const planJson = (plan: PlanBreakdown): string => JSON.stringify(plan, null, 2);

// ---------------------------------------------------------------------------------------------
// The role prompts

/** The reply-format paragraph; the schema itself only where the provider does not enforce it. */
export function outputFormat(schemaName: string, schema?: Record<string, unknown>): string {
  return renderTemplate(
    templateText('output-format'),
    { schemaName, schema: schema ? JSON.stringify(schema, null, 2) : '' },
    'output-format',
  );
}

/** What the built-in executors do, for a planner choosing among them. */
const EXECUTOR_NOTES: Record<string, string> = {
  llm: 'one model call whose answer is the result',
  agent: 'a model that works through tools (files, commands) step by step',
  command: "a coding-agent CLI run in a git worktree of the project's repository",
};

/**
 * The rule on a task's `executor` field: the choices the session allows (executor-choice.ts),
 * or none, so a model does not invent executor names the coordinator would take out anyway.
 */
export function executorRule(policy: ExecutorPolicy | undefined): string {
  const choices = policy?.taskExecutors.filter((name) => name !== policy.defaultExecutor) ?? [];
  if (choices.length === 0) {
    return '- `executor`: leave it out; orq runs every task on the executor its operator chose.';
  }
  const listed = choices
    .map((name) => (EXECUTOR_NOTES[name] ? `\`${name}\` (${EXECUTOR_NOTES[name]})` : `\`${name}\``))
    .join(', ');
  return `- \`executor\`: leave it out unless a task needs one of ${listed}; orq ignores any other name.`;
}

/** Seed 000: a replan carries the previous plan and the judge's issues and suggestions. */
export function plannerPrompt(request: PlanRequest, format: string): Prompt {
  const replan = request.attempt > 0 && (!!request.previousPlan || !!request.feedback);
  return renderPrompt('planner', {
    format,
    executorRule: executorRule(request.config.execution),
    instruction: request.instruction,
    requiredTerms: termList(request.requiredTerms),
    replan,
    attempt: String(request.attempt),
    previousPlan: request.previousPlan ? planJson(request.previousPlan) : NONE,
    issues: bulletList(request.feedback?.issues ?? []),
    suggestions: bulletList(request.feedback?.suggestions ?? []),
  });
}

export function planJudgePrompt(request: PlanJudgeRequest, format: string): Prompt {
  return renderPrompt('plan-judge', {
    format,
    instruction: request.instruction,
    requiredTerms: termList(request.requiredTerms),
    attempt: String(request.attempt),
    plan: planJson(request.plan),
  });
}

/** The outputs of a task's dependencies, each under its id and title. */
function dependencyList(results: readonly DependencyResult[]): string {
  return results
    .map(
      (dep) =>
        `#### \`${dep.taskId}\`: ${dep.title}\n\n"""\n${clipHead(dep.output, LIMITS.dependencyOutput)}\n"""`,
    )
    .join('\n\n');
}

export function executorPrompt(request: ExecuteRequest, format: string): Prompt {
  const { task } = request;
  const dependencies = dependencyList(request.dependencyResults);
  return renderPrompt('executor', {
    format,
    instruction: request.instruction,
    taskId: task.id,
    title: task.title,
    attempt: String(request.attempt),
    acceptance: task.acceptance,
    context: task.context,
    scopePaths: pathList(task.scopePaths),
    dependencies,
    feedback: request.feedback ?? '',
  });
}

/** Seed 001: the judge is told when to continue, when to replan and when to block. */
export function taskJudgePrompt(request: TaskJudgeRequest, format: string): Prompt {
  const { task, result } = request;
  // judging.checkAlreadySatisfied: asked before the task runs, with no result to judge.
  if (request.beforeRun) {
    return renderPrompt('task-check', {
      format,
      instruction: request.instruction,
      taskId: task.id,
      title: task.title,
      acceptance: task.acceptance,
      context: task.context,
      scopePaths: pathList(task.scopePaths),
      dependencies: dependencyList(request.beforeRun.dependencyResults),
    });
  }
  if (request.finalJudgement) {
    const final = request.finalJudgement;
    return renderPrompt('result-judge', {
      format,
      instruction: request.instruction,
      requiredTerms: termList(final.requiredTerms),
      round: String(final.round),
      branch: final.branch,
      commit: final.commit.slice(0, 12),
      tasks: bulletList(final.tasks.map((t) => `\`${t.taskId}\`: ${t.title}`)),
      diffStat: clipTail(final.diffStat || '(no changes)', LIMITS.log),
      checks: bulletList(
        final.checks.map(
          (c) =>
            `${c.name} (${c.mode}): ${c.passed ? 'passed' : `FAILED\n${clipTail(c.output ?? '', 2000)}`}`,
        ),
      ),
    });
  }
  return renderPrompt('task-judge', {
    format,
    instruction: request.instruction,
    taskId: task.id,
    title: task.title,
    attempt: String(request.attempt),
    acceptance: task.acceptance,
    context: task.context,
    scopePaths: pathList(task.scopePaths),
    output: clipHead(result.output, LIMITS.output),
    log: clipTail(result.log, LIMITS.log),
    error: result.error ?? '',
  });
}

/**
 * Seed 001: the original task's acceptance, context and scopePaths, the worker's log, the
 * judge's reason and missing requirements, and the policy to split into 3–5 smaller tasks with
 * dependencies only among themselves; seed 002: the required terms.
 */
export function replannerPrompt(request: ReplanRequest, format: string): Prompt {
  const { task, judgement, result } = request;
  return renderPrompt('replanner', {
    format,
    executorRule: executorRule(request.executors),
    instruction: request.instruction,
    requiredTerms: termList(request.requiredTerms),
    iteration: String(request.iteration),
    maxIterations: String(task.replanningInfo?.maxIterations ?? '?'),
    taskId: task.id,
    title: task.title,
    acceptance: task.acceptance,
    context: task.context || NONE,
    scopePaths: task.scopePaths.length > 0 ? pathList(task.scopePaths) : NONE,
    log: result?.log ? clipTail(result.log, LIMITS.log) : '(the worker left no log)',
    output: result?.output ? clipHead(result.output, LIMITS.replanOutput) : '',
    reason: judgement.reason || '(no reason given)',
    missingRequirements: bulletList(judgement.missingRequirements),
  });
}

/** The repair turn after an invalid reply (or an invalid native tool call: `toolCall`). */
export function repairPrompt(values: {
  schemaName: string;
  errors: string;
  toolCall?: boolean;
  /** The reply's JSON Schema, as text: a model whose server ignored the format never saw it. */
  schema?: string;
}): string {
  return renderTemplate(
    templateText('repair'),
    { ...values, toolCall: values.toolCall ?? false, schema: values.schema ?? '' },
    'repair',
  );
}
