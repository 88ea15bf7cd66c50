import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { HistoryEntry } from '../../src/shared/domain/history.js';
import { createBuiltinModels } from '../../src/workers/llm/builtin.js';
import { loadScenarioFile, type ScenarioInput } from '../../src/shared/config/scenario.js';
import type {
  ExecuteRequest,
  PlanJudgeRequest,
  PlanRequest,
  ReplanRequest,
  RoleModels,
  TaskJudgeRequest,
} from '../../src/workers/llm/types.js';
import type { OrqClient } from '../../src/producers/client.js';

/** Absolute path of a scenario in examples/scenarios/. */
export const exampleScenario = (name: string): string =>
  fileURLToPath(new URL(`../../examples/scenarios/${name}`, import.meta.url));

/** A scripted session of two tasks, B after A, whose plan is accepted at once. */
export const A_THEN_B: ScenarioInput = {
  plans: [
    {
      tasks: [
        { id: 'A', title: 'A', acceptance: 'a', context: 'c' },
        { id: 'B', title: 'B', acceptance: 'b', context: 'c', dependencies: ['A'] },
      ],
    },
  ],
  planJudgements: [{ score: 90, isAcceptable: true }],
};

/** A temp directory for scenario files written by a test file; `cleanup` removes it. */
export function scenarioDir(): {
  write(name: string, scenario: ScenarioInput): string;
  cleanup(): void;
} {
  const dir = mkdtempSync(join(tmpdir(), 'orq-scenarios-'));
  return {
    write(name, scenario) {
      const path = join(dir, `${name}.json`);
      writeFileSync(path, JSON.stringify(scenario, null, 2));
      return path;
    },
    cleanup: () => rmSync(dir, { recursive: true, force: true }),
  };
}

/** A promise with its resolve, for holding a model call until the test lets it go. */
export interface Deferred<T = void> {
  promise: Promise<T>;
  resolve(value: T): void;
}

export function deferred<T = void>(): Deferred<T> {
  let resolve!: (value: T) => void;
  const promise = new Promise<T>((r) => (resolve = r));
  return { promise, resolve };
}

export interface ModelHooks {
  beforeExecute?(request: ExecuteRequest): Promise<void> | void;
  beforeJudgeTask?(request: TaskJudgeRequest): Promise<void> | void;
  beforeJudgePlan?(request: PlanJudgeRequest): Promise<void> | void;
  beforeReplan?(request: ReplanRequest): Promise<void> | void;
}

export interface RecordedCalls {
  plan: PlanRequest[];
  execute: ExecuteRequest[];
  judgeTask: TaskJudgeRequest[];
  replan: ReplanRequest[];
}

/**
 * The builtin provider scripted by `scenario` (a path or the data), recording the requests the
 * roles make and letting a test hold a call. Passed as `models` to startCluster it serves every
 * session of every pod, so the calls are seen whichever pod makes them.
 */
export function recordingModels(
  scenario: ScenarioInput | string,
  hooks: ModelHooks = {},
): { models: RoleModels; calls: RecordedCalls } {
  const inner = createBuiltinModels({
    scenario: typeof scenario === 'string' ? loadScenarioFile(scenario) : scenario,
  });
  const calls: RecordedCalls = { plan: [], execute: [], judgeTask: [], replan: [] };
  const models: RoleModels = {
    label: inner.label,
    plan(request) {
      calls.plan.push(request);
      return inner.plan(request);
    },
    async judgePlan(request) {
      await hooks.beforeJudgePlan?.(request);
      return inner.judgePlan(request);
    },
    async execute(request) {
      calls.execute.push(request);
      await hooks.beforeExecute?.(request);
      return inner.execute(request);
    },
    async judgeTask(request) {
      calls.judgeTask.push(request);
      await hooks.beforeJudgeTask?.(request);
      return inner.judgeTask(request);
    },
    async replan(request) {
      calls.replan.push(request);
      await hooks.beforeReplan?.(request);
      return inner.replan(request);
    },
  };
  return { models, calls };
}

/** The session's history entries in stream order. */
export async function historyOf(client: OrqClient, sessionId: string): Promise<HistoryEntry[]> {
  return (await client.history(sessionId)).map((h) => h.entry);
}

type Decision = Extract<HistoryEntry, { type: 'decision' }>;
type StateChange = Extract<HistoryEntry, { type: 'state_change' }>;

export const decisions = (entries: HistoryEntry[], decision: string): Decision[] =>
  entries.filter((e): e is Decision => e.type === 'decision' && e.decision === decision);

/** Stream position of a task's move to `to` (the first one), or -1. */
export const taskMoved = (entries: HistoryEntry[], taskId: string, to: string): number =>
  entries.findIndex(
    (e): e is StateChange =>
      e.type === 'state_change' && e.entity === 'task' && e.taskId === taskId && e.to === to,
  );

type Execution = Extract<HistoryEntry, { type: 'execution' }>;

export const executionsOf = (entries: HistoryEntry[], taskId: string): Execution[] =>
  entries.filter((e): e is Execution => e.type === 'execution' && e.taskId === taskId);

/** Polls `check` until it returns a value other than undefined, for at most `timeoutMs`. */
export async function eventually<T>(
  check: () => Promise<T | undefined> | T | undefined,
  what: string,
  timeoutMs = 10_000,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value !== undefined) return value;
    if (Date.now() > deadline)
      throw new Error(`timed out after ${timeoutMs}ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}
