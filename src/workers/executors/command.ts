import { resolve } from 'node:path';
import formatBytes from 'bytes';
import type { CommandCheckConfig, CommandExecutorConfig } from '../../shared/config/schema.js';
import type { ProgressUpdate } from '../../shared/domain/progress.js';
import type { TaskResult } from '../../shared/domain/task.js';
import { OrqError, ValidationError } from '../../shared/errors.js';
import { providerKey } from '../../shared/config/provider-keys.js';
import {
  agentIdentityEnv,
  commitAll,
  commitEmpty,
  git,
  gitOk,
  openWorktree,
  taskBranchName,
  type Worktree,
} from './git-worktree.js';
import { writtenResultBranch } from '../integration/merge.js';
import { agentRecordPath, forgetAgent, recordAgent, stopLeftoverAgent } from './agent-record.js';
import { finishedAgentRun, recordAgentRun, restoreAgentRun } from './agent-runs.js';
import { describeOutcome, runProcess, withoutPodSecrets, type ProcessOutcome } from './process.js';
import { taskPrompt } from './prompt.js';
import { gateCommand } from './step-gate.js';
import type { Executor, ExecutorContext } from './types.js';
import { taskWorkspacePath } from './workspace-dir.js';

/** How much of the agent's output tail goes into the result's output (the log has it all). */
const OUTPUT_TAIL_CHARS = 4000;
/** Of the agent's last line, in the error of a failed run. */
const LAST_LINE_CHARS = 300;
/** The diff the Judge sees in the log is cut here; the branch has the rest. */
const DIFF_CHARS = 32_000;
const CHECK_OUTPUT_IN_PROMPT_CHARS = 4000;
/** How often a running command's output is reported as progress (when it printed more). */
const PROGRESS_EVERY_MS = 2_000;
/** The end of the output kept to find its last line for progress. */
const RECENT_OUTPUT_CHARS = 2_000;

/** Replaces `{{name}}` in each argv element; unknown names stay as written. No shell involved. */
export function fillTemplate(template: readonly string[], vars: Record<string, string>): string[] {
  return template.map((arg) =>
    arg.replace(/\{\{(\w+)\}\}/g, (all, name: string) => vars[name] ?? all),
  );
}

/**
 * The key a command's outside effects can be made idempotent by (ORQ_IDEMPOTENCY_KEY): the same
 * for every delivery of one attempt of a task, another for the next attempt.
 */
export function idempotencyKey(sessionId: string, taskId: string, attempt: number): string {
  return `orq:${sessionId}:${taskId}:${attempt}`;
}

/** The last line a command printed that says anything (how it failed, often), cut short. */
function lastLine(output: string): string | undefined {
  const line = output
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l !== '' && !l.startsWith('[... '))
    .at(-1);
  return line && line.length > LAST_LINE_CHARS ? `${line.slice(0, LAST_LINE_CHARS)}…` : line;
}

function tail(text: string, chars: number): string {
  return text.length > chars ? `[...]\n${text.slice(-chars)}` : text;
}

/**
 * Reports a running command as progress: once when it starts, then its output so far (size and
 * last line) every PROGRESS_EVERY_MS while it printed more. `stop()` when the command ended.
 */
function commandProgress(what: string, report: (update: ProgressUpdate) => void) {
  let bytes = 0;
  let reported = 0;
  let recent = '';
  report({ activity: `${what} started` });
  const timer = setInterval(() => {
    if (bytes === reported) return;
    reported = bytes;
    const line = lastLine(recent);
    report({
      activity: `${what}: ${formatBytes(bytes)} of output${line ? `; last: ${line}` : ''}`,
      outputBytes: bytes,
    });
  }, PROGRESS_EVERY_MS);
  timer.unref();
  return {
    onOutput(chunk: Buffer) {
      bytes += chunk.length;
      recent = (recent + chunk.toString('utf8')).slice(-RECENT_OUTPUT_CHARS);
    },
    stop: () => clearInterval(timer),
  };
}

interface CheckRun {
  check: CommandCheckConfig;
  outcome: ProcessOutcome;
  passed: boolean;
  timeoutMs: number;
}

function instructionsFor(worktree: Worktree): string {
  return [
    '',
    `You are working in a git worktree on branch ${worktree.branch}. Change the files needed to`,
    'fulfil the acceptance criteria; you may commit, and orq commits whatever you leave uncommitted.',
  ].join('\n');
}

/**
 * The command executor: a coding-agent CLI (claude -p, codex exec, aider --message...) run in a
 * git worktree on the task's own branch, with a timeout and a cap on captured output. Afterwards
 * everything is committed, the checks run (block / warn / retry once), and the result carries
 * the branch, commit, exit code and diff stat, with the diff in the log for the Judge.
 */
export function createCommandExecutor(): Executor {
  return {
    name: 'command',
    async execute(ctx) {
      const cfg = ctx.session.config.execution.command;
      if (!cfg) {
        throw new ValidationError(
          'command executor configuration',
          [
            {
              path: 'execution.command',
              message: 'required when a task runs with the command executor',
            },
          ],
          {
            hint: 'Set execution.command.template and execution.command.repository (see docs/executors.md)',
            details: { sessionId: ctx.session.id, taskId: ctx.task.id },
          },
        );
      }
      return runCommandTask(ctx, cfg);
    },
  };
}

/**
 * The provider keys the operator gives the agent CLI (execution.command.providerKeys). The pod
 * took its keys out of its environment (provider-keys.ts), so the CLI inherits none otherwise.
 */
function agentKeys(variables: readonly string[]): Record<string, string> {
  const keys: Record<string, string> = {};
  for (const variable of variables) {
    const key = providerKey(variable);
    if (key === undefined) {
      throw new OrqError(
        'CONFIG_INVALID',
        `execution.command.providerKeys names ${variable}, but neither ${variable} nor ${variable}_FILE is set in this pod`,
        {
          hint: `Export ${variable} (or ${variable}_FILE) for every worker pod, or drop it from providerKeys`,
          details: { variable },
        },
      );
    }
    keys[variable] = key;
  }
  return keys;
}

async function runCommandTask(
  ctx: ExecutorContext,
  cfg: CommandExecutorConfig,
): Promise<TaskResult> {
  const started = Date.now();
  const { session, task } = ctx;
  const keys = agentKeys(cfg.providerKeys);
  const repository = resolve(cfg.repository);
  const branch = taskBranchName(session.id, task.id);
  const path = taskWorkspacePath(session.config.execution.workspaceRoot, session.id, task.id);
  // Before each side effect: a delivery that lost its job to another pod must not touch the
  // worktree, the branch or the other delivery's agent (issue 35).
  const confirmCurrent = () => ctx.confirmCurrent?.() ?? Promise.resolve();
  await confirmCurrent();
  const agentRecord = agentRecordPath(path);
  const buildOn = await writtenResultBranch(repository, session.id);
  let stopped: string | undefined;
  const worktree = await openWorktree({
    repository,
    branch,
    path,
    ...(cfg.baseBranch ? { baseRef: cfg.baseBranch } : {}),
    // Once an integration round wrote the result branch, later tasks (a conflict's resolution,
    // the final judge's fixes) build on it: what they change is what the next round merges.
    // Asked of the repository: a pod's copy of the session record may predate the round.
    mergeBranches: [
      ...(buildOn ? [buildOn] : []),
      ...task.dependencies.map((id) => taskBranchName(session.id, id)),
    ],
    attempt: ctx.attempt,
    signal: ctx.signal,
    // Holding the task's lock, before the worktree is opened again: an agent a killed pod left
    // running must not write it (and no live delivery's agent is taken for one).
    beforeOpen: async () => {
      await confirmCurrent();
      stopped = await stopLeftoverAgent(agentRecord);
    },
  });
  // Stops the run when the job is cancelled, or when another delivery took the task over.
  const signal = AbortSignal.any([ctx.signal, worktree.lost]);
  try {
    const log: string[] = [
      `command executor: task ${task.id}, attempt ${ctx.attempt}, repository ${repository}`,
      ...(stopped ? [stopped] : []),
      ...worktree.notes,
    ];
    const timeoutMs = cfg.timeoutSeconds * 1000;
    const env = {
      ...withoutPodSecrets(),
      ...keys,
      ORQ_SESSION_ID: session.id,
      ORQ_TASK_ID: task.id,
      ORQ_ATTEMPT: String(ctx.attempt),
      // The same for every delivery of this attempt: a command that can run twice (a paused
      // pod's job redelivered) makes its outside effects once by it (docs/guarantees.md).
      ORQ_IDEMPOTENCY_KEY: idempotencyKey(session.id, task.id, ctx.attempt),
      ORQ_BRANCH: branch,
      // In a pod with no git identity, the agent's own commits are orq's fallback's (the
      // repository's, the agent's -c and the real global config win where they name one).
      ...(await agentIdentityEnv(worktree.path, signal)),
    };
    const basePrompt = `${taskPrompt(ctx)}\n${instructionsFor(worktree)}`;

    /** Why a person refused to let the agent run (approval.steps), once they did. */
    let rejected: string | undefined;

    const roundMessage = (round: number) =>
      `orq: ${task.id} attempt ${ctx.attempt}${round > 1 ? ` (round ${round})` : ''}: ${task.title}`;

    const runAgent = async (prompt: string, round: number): Promise<ProcessOutcome> => {
      // An earlier delivery of this attempt ran this round to its end and recorded it: its
      // result was lost, not its work, so the agent does not run again (issue 35). Its work
      // is committed now if that delivery ended before it could (issue 45).
      const earlier = await finishedAgentRun(worktree.path, branch, ctx.attempt, round);
      if (earlier) {
        let commit = earlier.commit;
        if (commit === undefined) {
          await confirmCurrent();
          await restoreAgentRun(worktree.path, earlier.record);
          commit =
            (await commitAll(worktree.path, roundMessage(round))) ??
            (await gitOk(['rev-parse', 'HEAD'], worktree.path));
        }
        log.push(
          `agent round ${round} ran in an earlier delivery of attempt ${ctx.attempt} (commit ${commit.slice(0, 12)}, ${describeOutcome(earlier.outcome, timeoutMs)}): not run again${earlier.commit ? '' : '; what it left was recorded but not committed: committed now'}`,
        );
        return earlier.outcome;
      }
      const argv = fillTemplate(cfg.template, {
        prompt,
        taskId: task.id,
        title: task.title,
        sessionId: session.id,
        branch,
        workdir: worktree.path,
        attempt: String(ctx.attempt),
      });
      const shown = argv.map((a) =>
        a === prompt ? `<prompt, ${prompt.length} chars>` : JSON.stringify(a),
      );
      log.push(`$ ${shown.join(' ')}`);
      // approval.steps: a command a person must approve first waits here, before it starts.
      const gate = await gateCommand(ctx, {
        round,
        argv,
        shown: shown.join(' '),
        root: worktree.path,
      });
      if (!gate.run) {
        rejected = gate.reason;
        log.push(`not run: ${gate.reason}`);
        return {
          exitCode: null,
          timedOut: false,
          aborted: false,
          durationMs: 0,
          output: '',
          truncatedBytes: 0,
        };
      }
      await confirmCurrent();
      const progress = commandProgress(
        round > 1 ? `agent (round ${round})` : 'agent',
        ctx.progress,
      );
      let agentPid: number | undefined;
      const outcome = await runProcess(argv, {
        cwd: worktree.path,
        timeoutMs,
        maxOutputBytes: cfg.maxOutputBytes,
        env,
        signal,
        onSpawn: (pid) => {
          agentPid = pid;
          recordAgent(agentRecord, pid);
        },
        onOutput: progress.onOutput,
      }).finally(() => {
        progress.stop();
        if (agentPid !== undefined) forgetAgent(agentRecord, agentPid);
      });
      signal.throwIfAborted();
      log.push(`agent ${describeOutcome(outcome, timeoutMs)} after ${outcome.durationMs} ms`);
      await confirmCurrent();
      // Recorded before the commit: a commit that fails (or a pod killed in between) must not
      // make the next delivery run the agent again.
      await recordAgentRun(worktree.path, branch, ctx.attempt, round, outcome);
      await commitAll(worktree.path, roundMessage(round));
      return outcome;
    };

    const runChecks = async (): Promise<CheckRun[]> => {
      const runs: CheckRun[] = [];
      for (const check of cfg.checks) {
        const checkTimeout = (check.timeoutSeconds ?? cfg.timeoutSeconds) * 1000;
        await confirmCurrent();
        const progress = commandProgress(`check ${check.name}`, ctx.progress);
        const outcome = await runProcess(check.command, {
          cwd: worktree.path,
          timeoutMs: checkTimeout,
          maxOutputBytes: cfg.maxOutputBytes,
          env,
          signal,
          onOutput: progress.onOutput,
        }).finally(progress.stop);
        signal.throwIfAborted();
        const passed = outcome.exitCode === 0;
        runs.push({ check, outcome, passed, timeoutMs: checkTimeout });
        log.push(
          `check ${check.name} (${check.mode}): ${passed ? 'passed' : `FAILED, ${describeOutcome(outcome, checkTimeout)}`}`,
          ...(passed ? [] : [tail(outcome.output, CHECK_OUTPUT_IN_PROMPT_CHARS)]),
        );
      }
      return runs;
    };

    let agent = await runAgent(basePrompt, 1);
    let checks = agent.exitCode === 0 ? await runChecks() : [];
    const toRetry = checks.filter((c) => !c.passed && c.check.mode === 'retry');
    if (toRetry.length > 0) {
      log.push(
        `running the agent again once for the failed check(s): ${toRetry.map((c) => c.check.name).join(', ')}`,
      );
      const retryPrompt = [
        basePrompt,
        '',
        'These checks failed after your changes; fix what they report:',
        ...toRetry.map(
          (c) =>
            `--- check ${c.check.name} (${c.check.command.join(' ')}): ${describeOutcome(c.outcome, c.timeoutMs)}\n${tail(c.outcome.output, CHECK_OUTPUT_IN_PROMPT_CHARS)}`,
        ),
      ].join('\n');
      agent = await runAgent(retryPrompt, 2);
      checks = agent.exitCode === 0 ? await runChecks() : [];
    }

    let head = await gitOk(['rev-parse', 'HEAD'], worktree.path);
    if (head === worktree.startCommit) {
      await confirmCurrent();
      head = await commitEmpty(
        worktree.path,
        `orq: ${task.id} attempt ${ctx.attempt} made no changes: ${task.title}`,
      );
    }
    const diffStat = (
      await git(['diff', '--stat', worktree.startCommit, head], worktree.path)
    ).stdout.trim();
    // Only the head of the diff is shown: git is stopped past it, whatever the diff's size.
    const diff = (
      await git(['diff', worktree.startCommit, head], worktree.path, undefined, DIFF_CHARS * 4)
    ).stdout;
    const warnings = checks.filter((c) => !c.passed && c.check.mode === 'warn');
    // After the one retry, a retry check that still fails blocks like a block check.
    const blocking = checks.filter((c) => !c.passed && c.check.mode !== 'warn');

    const agentFailed = agent.exitCode !== 0;
    const lastWords = lastLine(agent.output);
    const error = rejected
      ? rejected
      : agentFailed
        ? `the agent command ${describeOutcome(agent, timeoutMs)}${lastWords ? `; last output: ${lastWords}` : ''}`
        : blocking.length > 0
          ? `check(s) failed: ${blocking.map((c) => `${c.check.name} (${describeOutcome(c.outcome, c.timeoutMs)})`).join(', ')}`
          : undefined;
    const statLine = diffStat.split('\n').at(-1)?.trim() || 'no changes';
    const summary = rejected
      ? `Agent not run on branch ${branch}: ${rejected}`
      : `Agent ${describeOutcome(agent, timeoutMs)} on branch ${branch}, commit ${head.slice(0, 12)}: ${statLine}`;
    log.push(
      ...warnings.map((c) => `warning: check ${c.check.name} failed (mode warn)`),
      `commit ${head} on branch ${branch}`,
      `diff stat against ${worktree.startCommit.slice(0, 12)}:`,
      diffStat || '(no changes)',
      'diff:',
      diff.length > DIFF_CHARS
        ? `${diff.slice(0, DIFF_CHARS)}\n[... diff cut at ${DIFF_CHARS} characters ...]`
        : diff || '(empty)',
      'agent output (tail):',
      agent.output,
    );
    return {
      output: `${summary}\n\n${tail(agent.output, OUTPUT_TAIL_CHARS)}`.trim(),
      log: log.join('\n'),
      artifacts: [
        {
          kind: 'git',
          path: repository,
          meta: {
            repository,
            branch,
            commit: head,
            baseCommit: worktree.startCommit,
            exitCode: agent.exitCode,
            timedOut: agent.timedOut,
            diffStat,
            checks: checks.map((c) => ({
              name: c.check.name,
              mode: c.check.mode,
              passed: c.passed,
              exitCode: c.outcome.exitCode,
            })),
          },
        },
      ],
      tokenUsage: { inputTokens: 0, outputTokens: 0 },
      durationMs: Date.now() - started,
      ...(error ? { error } : {}),
    };
  } finally {
    // A delivery that lost its job leaves the worktree: the job's new delivery may work in it
    // now (on this host), and replaces it when it opens it anyway.
    const lost = await confirmCurrent().then(
      () => false,
      (error: unknown) => error instanceof OrqError && error.code === 'DELIVERY_LOST',
    );
    await (lost ? worktree.leave() : worktree.remove());
  }
}
