import { readFileSync } from 'node:fs';
import { extname } from 'node:path';
import { LineCounter, parseDocument, isNode } from 'yaml';
import { z } from 'zod';
import { PlanBreakdown, PlannedTask, QualityJudgement, ReplanBreakdown } from '../domain/plan.js';
import { TaskId, TaskJudgement, TaskResult } from '../domain/task.js';
import { OrqError, describeZodIssues, unreadableReason, type FieldIssue } from '../errors.js';

/**
 * A scenario scripts what the builtin provider returns, call by call, so tests and demos can
 * replay replans, judge noise, continuations, blocks and transient failures exactly. Whatever
 * a scenario leaves out falls back to the builtin's default rules.
 *
 * Array entries are indexed by attempt; past the end of an array the last entry is reused, so
 * `[{ success: false, shouldContinue: true }, { success: true }]` reads "continue once, then
 * succeed".
 *
 * Objects are strict: scenarios are written by hand, and a misspelt key must be an error that
 * names it rather than a silently ignored line.
 */

/** An entry that makes the scripted call throw (a provider error, not a model answer). */
export const ScriptedFailure = z.strictObject({
  error: z.string().min(1).describe('Message of the error the call throws.'),
});
export type ScriptedFailure = z.infer<typeof ScriptedFailure>;

const StrictPlannedTask = PlannedTask.strict();

const ScriptedPlan = PlanBreakdown.extend({ tasks: z.array(StrictPlannedTask).min(1) }).strict();
const ScriptedReplan = ReplanBreakdown.extend({
  tasks: z.array(StrictPlannedTask).min(1),
}).strict();

/**
 * A partial TaskResult: the fields given replace those of the default execution, the others
 * keep the builtin's values. Built from TaskResult's own fields with their defaults removed, so
 * an omitted field is really absent instead of reset to its default.
 */
const ScriptedTaskResult = z.strictObject({
  output: TaskResult.shape.output.optional(),
  log: TaskResult.shape.log.unwrap().optional(),
  artifacts: TaskResult.shape.artifacts.unwrap().optional(),
  tokenUsage: TaskResult.shape.tokenUsage.unwrap().optional(),
  durationMs: TaskResult.shape.durationMs.unwrap().optional(),
  error: TaskResult.shape.error,
});
export type ScriptedTaskResult = z.infer<typeof ScriptedTaskResult>;

export const ScriptedTask = z.strictObject({
  results: z
    .array(z.union([ScriptedFailure, ScriptedTaskResult]))
    .optional()
    .describe(
      'Per execution attempt (attempt n uses entry n-1). `{ error }` alone makes the worker call ' +
        'throw; a result that reports an error gives `output` too, e.g. `{ output: "", error: "..." }`.',
    ),
  judgements: z
    .array(
      z.union([
        ScriptedFailure,
        TaskJudgement.strict(),
        // One verdict per opinion (llm.judgeSamples.confirmTaskVerdicts), the last repeating.
        z.array(z.union([ScriptedFailure, TaskJudgement.strict()])).min(1),
      ]),
    )
    .optional()
    .describe(
      'Per execution attempt (attempt n uses entry n-1): the judge verdict, or a list of one per opinion when confirmTaskVerdicts asks again.',
    ),
  beforeRun: z
    .union([ScriptedFailure, TaskJudgement.strict()])
    .optional()
    .describe(
      "The judge's answer when asked before the task's first execution (judging.checkAlreadySatisfied); without it, not met.",
    ),
  replan: z
    .union([ScriptedFailure, ScriptedReplan])
    .optional()
    .describe('Subtasks the replanner returns for this task.'),
});
export type ScriptedTask = z.infer<typeof ScriptedTask>;

/**
 * The plan judge's replies to the k samples of one attempt (sample i uses entry i; past the end
 * the last entry). Without sampling only the first entry is used.
 */
export const ScriptedJudgeSamples = z
  .array(z.union([ScriptedFailure, QualityJudgement.strict()]))
  .min(1);
export type ScriptedJudgeSamples = z.infer<typeof ScriptedJudgeSamples>;

export const ScriptedRole = z.enum(['planner', 'judge', 'worker', 'replanner']);
export type ScriptedRole = z.infer<typeof ScriptedRole>;

/**
 * Transient failures, to exercise retries. Several processes may replay the same scenario, so
 * the count cannot live in process memory: a call fails while the queue job's attempt number
 * (BullMQ `attemptsMade`, 0 on the first delivery) is below `times`. See `jobAttemptOf` in
 * builtin.ts for where that number is read from.
 */
export const ScriptedFailureRule = z.strictObject({
  role: ScriptedRole,
  times: z.number().int().min(1).max(100),
  /** Only calls about this task (worker, task judge, replanner). */
  taskId: TaskId.optional(),
  /** Only this call attempt: plan attempt, execution attempt, or replan iteration. */
  attempt: z.number().int().min(0).optional(),
});
export type ScriptedFailureRule = z.infer<typeof ScriptedFailureRule>;

export const Scenario = z.strictObject({
  description: z.string().optional().describe('What the scenario demonstrates.'),
  plans: z
    .array(z.union([ScriptedFailure, ScriptedPlan]))
    .optional()
    .describe('Per plan attempt (0 = first plan, n = n-th replan).'),
  planJudgements: z
    .array(z.union([ScriptedFailure, QualityJudgement.strict(), ScriptedJudgeSamples]))
    .optional()
    .describe(
      'Per plan attempt. Omit `score` to simulate "score unavailable". An array scripts one ' +
        'reply per judge sample (llm.judgeSamples.k), e.g. three noisy scores of one plan.',
    ),
  tasks: z.record(TaskId, ScriptedTask).optional().describe('Scripts keyed by task id.'),
  latencyMs: z
    .number()
    .int()
    .min(0)
    .max(600_000)
    .optional()
    .describe('Sleep before every call (the createBuiltinModels option wins when both are set).'),
  failures: z.array(ScriptedFailureRule).optional(),
});
export type Scenario = z.infer<typeof Scenario>;
/** Input form, as written in a file or a test: defaults may be omitted. */
export type ScenarioInput = z.input<typeof Scenario>;

/** The scenario (file) does not parse or does not match the schema. */
export class ScenarioError extends OrqError {
  readonly issues: FieldIssue[];

  constructor(source: string, issues: FieldIssue[], cause?: unknown) {
    const list = issues.map((i) => `${i.path}: ${i.message}`).join('; ');
    super('SCENARIO_INVALID', `Invalid scenario in ${source}: ${list}`, {
      hint: 'See examples/scenarios/ for the format of every section',
      details: { source },
      cause,
    });
    this.name = 'ScenarioError';
    this.issues = issues;
  }
}

type Issue = z.core.$ZodIssue;

/**
 * A union failure reports every branch; keep the branch that got furthest (deepest path, then
 * fewest issues), so `plans.0.tasks.0.title` is named instead of "plans.0: Invalid input".
 */
function flattenUnionIssues(issues: readonly Issue[], prefix: PropertyKey[] = []): Issue[] {
  return issues.flatMap((issue): Issue[] => {
    const path = [...prefix, ...issue.path];
    if (issue.code !== 'invalid_union' || issue.errors.length === 0) return [{ ...issue, path }];
    const depth = (branch: Issue[]) => Math.max(...branch.map((i) => i.path.length));
    let best = issue.errors[0] ?? [];
    for (const branch of issue.errors.slice(1)) {
      const better =
        depth(branch) > depth(best) ||
        (depth(branch) === depth(best) && branch.length < best.length);
      if (better) best = branch;
    }
    return flattenUnionIssues(best, path);
  });
}

function scenarioIssues(error: z.ZodError): FieldIssue[] {
  const flat = new z.ZodError(flattenUnionIssues(error.issues));
  return describeZodIssues(flat);
}

/** Validates a scenario given as data (from a test, or an already parsed file). */
export function parseScenario(input: unknown, source = 'scenario'): Scenario {
  const result = Scenario.safeParse(input);
  if (!result.success) throw new ScenarioError(source, scenarioIssues(result.error));
  return result.data;
}

/**
 * Loads and validates a scenario file: `.json` as JSON, anything else as YAML. Synchronous: a
 * scenario is read once, like a configuration file, when a process sets up its models.
 */
export function loadScenarioFile(path: string): Scenario {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (cause) {
    throw new OrqError(
      'SCENARIO_INVALID',
      `Cannot read scenario file ${path} (${unreadableReason(cause)})`,
      {
        hint: 'Check the path given for the scenario',
        details: { source: path },
        cause,
      },
    );
  }

  if (extname(path).toLowerCase() === '.json') {
    let data: unknown;
    try {
      data = JSON.parse(text);
    } catch (cause) {
      const message = cause instanceof Error ? cause.message : String(cause);
      throw new ScenarioError(path, [{ path: '(root)', message: `not valid JSON: ${message}` }]);
    }
    return parseScenario(data ?? {}, path);
  }

  const lineCounter = new LineCounter();
  const doc = parseDocument(text, { lineCounter, prettyErrors: true });
  if (doc.errors.length > 0) {
    throw new ScenarioError(
      path,
      doc.errors.map((e) => ({
        path: e.linePos ? `line ${e.linePos[0].line}` : '(root)',
        message: `not valid YAML: ${e.message.split('\n')[0] ?? e.code}`,
      })),
    );
  }
  // An empty file is an empty scenario: every call takes the default rules.
  const data: unknown = doc.toJS() ?? {};
  const result = Scenario.safeParse(data);
  if (result.success) return result.data;

  const issues = flattenUnionIssues(result.error.issues);
  const described = describeZodIssues(new z.ZodError(issues)).map((fieldIssue, i) => {
    const line = lineOf(doc, lineCounter, issues[i]?.path ?? []);
    return line === undefined
      ? fieldIssue
      : { ...fieldIssue, message: `${fieldIssue.message} (line ${line})` };
  });
  throw new ScenarioError(path, described);
}

/** The line of the deepest node along `path` that exists in the document. */
function lineOf(
  doc: ReturnType<typeof parseDocument>,
  lineCounter: LineCounter,
  path: readonly PropertyKey[],
): number | undefined {
  const keys = path.filter((k): k is string | number => typeof k !== 'symbol');
  for (let n = keys.length; n >= 0; n--) {
    const node: unknown = n === 0 ? doc.contents : doc.getIn(keys.slice(0, n), true);
    if (isNode(node) && node.range) return lineCounter.linePos(node.range[0]).line;
  }
  return undefined;
}
