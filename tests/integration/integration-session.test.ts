import { mkdirSync, mkdtempSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Job } from 'bullmq';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { HistoryEntry } from '../../src/shared/domain/history.js';
import { silentLogger } from '../../src/shared/logger.js';
import type { OrqConfigInput } from '../../src/shared/config/schema.js';
import { jobIds } from '../../src/shared/queues.js';
import { taskBranchName } from '../../src/workers/executors/git-worktree.js';
import { createIntegrationProcessor } from '../../src/workers/integration/processor.js';
import type { RoleContext } from '../../src/workers/roles/context.js';
import { formatResultSection, resultNotices } from '../../src/producers/cli/result-text.js';
import { formatSessionTable } from '../../src/producers/cli/format.js';
import { scanSessions } from '../../src/producers/http/metrics.js';
import { clusterPerTest } from '../support/cluster.js';
import { bullQueue } from '../support/pods.js';
import { bearer, serveApi } from '../support/http.js';
import { startFakeLlmServer } from '../support/fake-llm-server.js';
import { git } from '../support/git.js';
import { eventually, recordingModels } from '../support/scenarios.js';

const FAKE_AGENT = fileURLToPath(new URL('../fixtures/fake-coding-agent.mjs', import.meta.url));

let tmp: string;
beforeAll(() => {
  tmp = realpathSync(mkdtempSync(join(tmpdir(), 'orq-integrate-')));
});
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

let count = 0;
function makeRepo(): string {
  const repo = join(tmp, `repo${++count}`);
  mkdirSync(repo);
  git(['init', '-q'], repo);
  // The tasks' executor commits with the repository's identity (its fallback for a machine
  // with none is issue 45's); the integration's own commits are tested without one in
  // integration-merge.test.ts.
  git(['config', 'user.name', 'orq-test'], repo);
  git(['config', 'user.email', 'orq-test@example.com'], repo);
  writeFileSync(join(repo, 'README.md'), '# project\n');
  writeFileSync(join(repo, 'shared.txt'), 'top\n');
  git(['add', '-A'], repo);
  git(['commit', '-q', '-m', 'initial'], repo);
  return repo;
}

function commandConfig(repo: string, command: Record<string, unknown> = {}): OrqConfigInput {
  return {
    execution: {
      defaultExecutor: 'command',
      workspaceRoot: join(tmp, `ws${count}`),
      command: {
        template: [process.execPath, FAKE_AGENT, '{{prompt}}'],
        repository: repo,
        ...command,
      },
    },
  };
}

const decisions = (history: HistoryEntry[]) =>
  history.flatMap((e) => (e.type === 'decision' ? [e] : []));
const sessionStates = (history: HistoryEntry[]) =>
  history.flatMap((e) => (e.type === 'state_change' && e.entity === 'session' ? [e.to] : []));

/**
 * A budget the calls of INSTRUCTION's session fit until its final judgement: each call reserves
 * `reserve` tokens first, and the tasks' calls leave less room than that for the final judge.
 * Measured: the session stops there with maxTokens from about 2,350 to 2,800 (below, earlier;
 * above, not at all); the builtin provider's counts vary only with the paths in the tasks' logs.
 */
const BUDGET_PROBE = { maxTokens: 2550, reserve: 1000 };

/** "Write the parser and write the printer": t1 and t2 side by side, t3 after both. */
const INSTRUCTION = 'Write the parser and write the printer';

/** A blocking check that, on the result branch only, waits until the file `gate` exists. */
function heldAt(gate: string) {
  const held = [
    "const fs = require('fs');",
    "if (process.env.ORQ_BRANCH.endsWith('/result')) {",
    `  const wait = () => (fs.existsSync(${JSON.stringify(gate)}) ? null : setTimeout(wait, 50));`,
    '  wait();',
    '}',
  ].join('\n');
  return {
    checks: [{ name: 'held', command: [process.execPath, '-e', held], mode: 'block' as const }],
  };
}

describe('a session whose tasks commit to git branches', () => {
  const startCluster = clusterPerTest();

  it('ends with one result branch holding every task, checked, named in its result', async () => {
    const repo = makeRepo();
    const check = "require('fs').accessSync('t1.txt'); require('fs').accessSync('README.md')";
    const cluster = await startCluster({
      config: commandConfig(repo, {
        checks: [{ name: 'files', command: [process.execPath, '-e', check], mode: 'warn' }],
      }),
    });
    const session = await cluster.client.submit({ instruction: INSTRUCTION });
    const view = await cluster.client.wait(session.id, { timeoutMs: 60_000 });
    expect(view.session.state).toBe('COMPLETED');

    const branch = `orq/${session.id}/result`;
    const commit = git(['rev-parse', branch], repo);
    expect(git(['ls-tree', '--name-only', branch], repo).split('\n')).toEqual([
      'README.md',
      'shared.txt',
      't1.txt',
      't2.txt',
      't3.txt',
    ]);
    // Every task's commit is in the result.
    for (const id of ['t1', 't2', 't3']) {
      const tip = git(['rev-parse', taskBranchName(session.id, id)], repo);
      expect(() => git(['merge-base', '--is-ancestor', tip, branch], repo)).not.toThrow();
    }

    const result = await cluster.client.result(session.id);
    expect(result.complete).toBe(true);
    expect(result.integration).toMatchObject({
      status: 'merged',
      branch,
      commit,
      strategy: 'merge',
      baseCommit: git(['rev-parse', 'main'], repo),
      checks: [{ name: 'files', mode: 'warn', passed: true }],
    });
    expect(result.integration?.tasks.map((t) => t.taskId)).toEqual(['t1', 't2', 't3']);
    expect(result.integration?.diffStat).toMatch(/3 files changed, 3 insertions/);
    expect(resultNotices(result)).toContain(
      `orq: result branch ${branch} at ${commit.slice(0, 12)} (merge of 3 tasks): 3 files changed, 3 insertions(+)`,
    );
    expect(formatResultSection(result)).toContain('check files (warn) on the result: passed');
    expect(result.finalJudgement).toMatchObject({ round: 1, done: true, missing: [] });
    expect(resultNotices(result)).toContain(
      `orq: final judgement (round 1): done, ${branch} holds 3 task(s) and no blocking check failed\n`,
    );
    // `orq status` names it too.
    expect(formatSessionTable(await cluster.client.get(session.id))).toContain(
      `\nintegration: result branch ${branch} at ${commit.slice(0, 12)} (merge of 3 tasks)`,
    );
    // The HTTP API gives the same.
    const server = await serveApi(cluster.client, { token: 'test-token-0123456789abcdef' });
    try {
      const answer = await fetch(`${server.url}/sessions/${session.id}/result`, {
        headers: bearer('test-token-0123456789abcdef'),
      });
      expect(answer.status).toBe(200);
      const body = (await answer.json()) as typeof result;
      expect(body.integration).toEqual(result.integration);
      expect(body.finalJudgement).toEqual(result.finalJudgement);
    } finally {
      await server.close();
    }

    const history = (await cluster.client.history(session.id)).map((h) => h.entry);
    expect(sessionStates(history).slice(-2)).toEqual(['INTEGRATING', 'COMPLETED']);
    expect(decisions(history).find((d) => d.decision === 'integration:done')?.reason).toBe(
      `the final judge found ${branch} done: ${branch} holds 3 task(s) and no blocking check failed`,
    );
    const start = decisions(history).find((d) => d.decision === 'integration:start');
    expect(start?.inputs).toMatchObject({ order: ['t1', 't2', 't3'], branch });
    const merged = decisions(history).find((d) => d.decision === 'integration:merged');
    expect(merged?.reason).toMatch(/^merged 3 task\(s\) into .* at [0-9a-f]{12} \(3 files/);
    expect(merged?.inputs).toMatchObject({ commit, checks: [{ name: 'files', passed: true }] });
  });

  it('fails with the files and the two tasks when two tasks edit the same lines', async () => {
    const repo = makeRepo();
    // Every task adds its id at the end of shared.txt: t1 and t2, side by side, collide.
    const append = "require('fs').appendFileSync('shared.txt', process.argv[1] + '\\n')";
    const cluster = await startCluster({
      config: {
        ...commandConfig(repo, { template: [process.execPath, '-e', append, '{{taskId}}'] }),
        integration: { maxResolutionRounds: 0 },
      },
    });
    const session = await cluster.client.submit({ instruction: INSTRUCTION });
    const view = await cluster.client.wait(session.id, { timeoutMs: 60_000 });

    expect(view.session.state).toBe('FAILED');
    expect(view.session.failure).toEqual({
      code: 'INTEGRATION_CONFLICT',
      reason: `t2 (write the printer) conflicts with t1 (Write the parser) in shared.txt; orq/${session.id}/result was not written`,
    });
    const history = (await cluster.client.history(session.id)).map((h) => h.entry);
    const conflict = decisions(history).find((d) => d.decision === 'integration:conflict');
    expect(conflict?.inputs.conflict).toEqual({
      files: ['shared.txt'],
      taskId: 't2',
      title: 'write the printer',
      withTaskId: 't1',
      withTitle: 'Write the parser',
      hunks: expect.stringContaining('<<<<<<<'),
    });
    expect(git(['branch', '--list', `orq/${session.id}/result`], repo)).toBe('');
    const result = await cluster.client.result(session.id);
    expect(result.integration?.status).toBe('conflict');
  });

  it('turns a conflict into a resolution task, then merges its branch cleanly', async () => {
    const repo = makeRepo();
    // t1 and t2 collide in shared.txt; the resolution task merges t2's branch, keeping both.
    const agent = [
      "const { execFileSync } = require('child_process');",
      "const fs = require('fs');",
      'const [taskId, prompt] = process.argv.slice(1);',
      "if (taskId === 't1' || taskId === 't2') fs.appendFileSync('shared.txt', taskId + '\\n');",
      "else if (taskId.startsWith('resolve')) {",
      '  const branch = /Merge the branch (\\S+) into yours/.exec(prompt)[1];',
      "  try { execFileSync('git', ['merge', '--no-edit', branch], { stdio: 'ignore' }); } catch {",
      "    const kept = fs.readFileSync('shared.txt', 'utf8').split('\\n').filter((l) => !/^(<<<<<<<|=======|>>>>>>>)/.test(l));",
      "    fs.writeFileSync('shared.txt', kept.join('\\n'));",
      "    execFileSync('git', ['add', '-A']);",
      "    execFileSync('git', ['commit', '-q', '--no-edit']);",
      '  }',
      "} else fs.writeFileSync(taskId + '.txt', taskId + '\\n');",
    ].join('\n');
    const cluster = await startCluster({
      config: commandConfig(repo, {
        template: [process.execPath, '-e', agent, '{{taskId}}', '{{prompt}}'],
      }),
    });
    const session = await cluster.client.submit({ instruction: INSTRUCTION });
    const view = await cluster.client.wait(session.id, { timeoutMs: 90_000 });
    expect(view.session.state).toBe('COMPLETED');

    const resolver = view.tasks.find((t) => t.id === 'resolve-conflict-1');
    expect(resolver).toMatchObject({
      state: 'DONE',
      title: 'Resolve the conflict between t1 and t2',
      dependencies: ['t1', 't2'],
      scopePaths: ['shared.txt'],
    });
    expect(resolver?.acceptance).toContain('t1 "Write the parser"');
    expect(resolver?.acceptance).toContain('t2 "write the printer"');
    expect(resolver?.context).toContain('<<<<<<<');

    const branch = `orq/${session.id}/result`;
    expect(git(['show', `${branch}:shared.txt`], repo)).toBe('top\nt1\nt2');
    const result = await cluster.client.result(session.id);
    expect(result.integration?.tasks.map((t) => [t.taskId, t.how, t.via])).toEqual([
      ['t1', 'merged', undefined],
      ['t2', 'contained', 'resolve-conflict-1'],
      ['t3', 'merged', undefined],
      ['resolve-conflict-1', 'merged', undefined],
    ]);
    const history = (await cluster.client.history(session.id)).map((h) => h.entry);
    expect(decisions(history).map((d) => d.decision)).toEqual(
      expect.arrayContaining(['integration:resolve', 'integration:merged']),
    );
    expect(decisions(history).find((d) => d.decision === 'integration:resolve')?.inputs.phase).toBe(
      'resolving',
    );
    expect(view.session.integration).toMatchObject({ round: 2, resolutions: 1, fixes: 0 });
    expect(sessionStates(history).slice(-4)).toEqual([
      'INTEGRATING',
      'RUNNING',
      'INTEGRATING',
      'COMPLETED',
    ]);
  });

  it('applies the outcome of the latest delivery once when the integrate job runs twice', async () => {
    const repo = makeRepo();
    const gate = join(tmp, 'gate');
    // Holds the first delivery in its check on the result branch until the gate file appears.
    const cluster = await startCluster({ config: commandConfig(repo, heldAt(gate)) });
    const session = await cluster.client.submit({ instruction: INSTRUCTION });
    const integrating = await eventually(
      async () => {
        const v = await cluster.client.get(session.id);
        return v.session.state === 'INTEGRATING' ? v : undefined;
      },
      'the session integrating',
      60_000,
    );
    expect(formatSessionTable(integrating)).toContain(
      `\nintegrating (round 1): merging the task branches into orq/${session.id}/result`,
    );
    // /metrics counts it by its phase.
    expect(
      (await scanSessions(cluster.client.store.redis, cluster.prefix)).byIntegrationPhase,
    ).toMatchObject({ merging: 1, judging: 0 });
    // A second delivery of the same job (a redelivery while the first still runs): it takes a
    // later fence, waits for the first's lock, then reads the round the first recorded.
    const pod = cluster.pods[0];
    if (!pod) throw new Error('no pod');
    const ctx = {
      store: pod.store,
      queues: pod.queues,
      logger: silentLogger,
      lockDurationMs: 30_000,
      // No model calls: only the session's end would stop it, and it does not end here.
      models: {
        forExecution: () => ({
          signal: new AbortController().signal,
          sessionFinished: () => false,
          release: () => undefined,
        }),
      },
    } as unknown as RoleContext;
    const jobId = jobIds.integrate(session.id, 1);
    const second = createIntegrationProcessor(ctx)({
      id: jobId,
      name: 'integrate',
      queueName: 'work',
      attemptsStarted: 1,
      data: { sessionId: session.id, round: 1 },
    } as unknown as Job);
    await eventually(
      async () => (await pod.store.currentFence(session.id, '@integration', 1)) === 2 || undefined,
      'the second delivery holding fence 2',
    );
    writeFileSync(gate, '');
    expect(await second).toBe('merged');
    const view = await cluster.client.wait(session.id, { timeoutMs: 30_000 });
    expect(view.session.state).toBe('COMPLETED');

    const history = (await cluster.client.history(session.id)).map((h) => h.entry);
    expect(decisions(history).filter((d) => d.decision === 'integration:merged')).toHaveLength(1);
    await eventually(async () => {
      const all = (await cluster.client.history(session.id)).map((h) => h.entry);
      return decisions(all).find((d) => /superseded delivery/.test(d.reason));
    }, "the first delivery's outcome refused");
    const branch = `orq/${session.id}/result`;
    expect((await cluster.client.result(session.id)).integration?.commit).toBe(
      git(['rev-parse', branch], repo),
    );
    // One merge per task on the branch's own line: the first delivery's merges are nowhere.
    expect(
      git(['rev-list', '--merges', '--first-parent', '--count', `main..${branch}`], repo),
    ).toBe('3');
  });

  it('can be cancelled while it integrates: the job stops and writes nothing', async () => {
    const repo = makeRepo();
    const gate = join(tmp, 'cancel-gate');
    const cluster = await startCluster({ config: commandConfig(repo, heldAt(gate)) });
    const session = await cluster.client.submit({ instruction: INSTRUCTION });
    await eventually(
      async () =>
        (await cluster.client.get(session.id)).session.state === 'INTEGRATING' || undefined,
      'the session integrating',
      60_000,
    );
    await cluster.client.cancel(session.id, 'not needed any more');
    const view = await cluster.client.wait(session.id, { timeoutMs: 30_000 });
    expect(view.session.state).toBe('CANCELLED');
    // The integrate job stops with the session: its check is killed, nothing is written.
    const work = bullQueue(cluster.client.store.redis, cluster.prefix, 'work');
    try {
      const ended = await eventually(async () => {
        const job = await work.getJob(jobIds.integrate(session.id, 1));
        // finishedOn, not a later isCompleted(): the job read before it finished has no
        // returnvalue although it is completed by the time isCompleted() asks.
        return job?.finishedOn && (await job.isCompleted()) ? job : undefined;
      }, 'the job ended');
      expect(ended.returnvalue).toBe('session ended');
    } finally {
      await work.close();
    }
    expect(git(['branch', '--list', `orq/${session.id}/result`], repo)).toBe('');
    expect((await cluster.client.get(session.id)).session.state).toBe('CANCELLED');
  });

  it('has the final judge add a fix task for a check failing on the merged tree, then moves the branch', async () => {
    const repo = makeRepo();
    // Each task writes <id>.txt; the tasks the final judgement adds write fixed.txt, which the
    // check on the result branch wants.
    const agent = [
      "const fs = require('fs');",
      'const taskId = process.argv[1];',
      "fs.writeFileSync(taskId.startsWith('final-judgement') ? 'fixed.txt' : taskId + '.txt', taskId + '\\n');",
    ].join('\n');
    const check = [
      "if (process.env.ORQ_BRANCH.endsWith('/result') && !require('fs').existsSync('fixed.txt')) {",
      "  console.log('fixed.txt is missing'); process.exit(1);",
      '}',
    ].join('\n');
    const cluster = await startCluster({
      config: commandConfig(repo, {
        template: [process.execPath, '-e', agent, '{{taskId}}'],
        checks: [{ name: 'fixed', command: [process.execPath, '-e', check], mode: 'block' }],
      }),
    });
    const session = await cluster.client.submit({ instruction: INSTRUCTION });
    const view = await cluster.client.wait(session.id, { timeoutMs: 90_000 });
    expect(view.session.state).toBe('COMPLETED');

    const history = (await cluster.client.history(session.id)).map((h) => h.entry);
    const byName = (name: string) => decisions(history).filter((d) => d.decision === name);
    // Round 1: merged, the check failed, the final judge named it, the Replanner split it.
    const [failed] = byName('integration:checks-failed');
    expect(failed?.reason).toMatch(
      /check\(s\) failed there: fixed \(block\); the final judge reviews it$/,
    );
    const [missing] = byName('integration:missing');
    expect(missing?.inputs).toMatchObject({
      round: 1,
      requiredTerms: view.session.requiredTerms.terms,
      diffStat: expect.stringContaining('3 files changed'),
      checks: [{ name: 'fixed', mode: 'block', passed: false }],
      missing: [expect.stringContaining('Make the check fixed pass on the merged tree')],
    });
    expect(byName('integration:fix')[0]?.inputs).toMatchObject({ taskId: 'final-judgement-1' });
    const fix = view.tasks.find((t) => t.id === 'final-judgement-1');
    expect(fix?.state).toBe('REPLACED_BY_REPLAN');
    const subtasks = view.tasks.filter((t) => t.id.startsWith('final-judgement-1.'));
    expect(subtasks.length).toBeGreaterThan(0);
    expect(subtasks.every((t) => t.state === 'DONE')).toBe(true);
    // They started from round 1's result branch.
    const roundOne = failed?.inputs.commit as string;
    for (const sub of subtasks) {
      const tip = git(['rev-parse', taskBranchName(session.id, sub.id)], repo);
      expect(() => git(['merge-base', '--is-ancestor', roundOne, tip], repo)).not.toThrow();
    }
    // Each step says the phase it leads into (the events carry it as they carry the history).
    expect(
      decisions(history)
        .filter((d) => d.decision.startsWith('integration:'))
        .map((d) => [d.decision, d.inputs.phase]),
    ).toEqual([
      ['integration:start', 'merging'],
      ['integration:checks-failed', 'judging'],
      ['integration:missing', 'judging'],
      ['integration:fix', 'fixing'],
      ['integration:start', 'merging'],
      ['integration:merged', 'judging'],
      ['integration:done', 'judging'],
    ]);
    // Round 2 merged the subtasks on top of round 1's result and the judge found it done.
    expect(byName('integration:done')[0]?.inputs).toMatchObject({ round: 2 });
    expect(sessionStates(history).slice(-4)).toEqual([
      'INTEGRATING',
      'RUNNING',
      'INTEGRATING',
      'COMPLETED',
    ]);
    const branch = `orq/${session.id}/result`;
    const result = await cluster.client.result(session.id);
    const first = failed?.inputs.commit as string;
    expect(result.integration).toMatchObject({
      status: 'merged',
      commit: git(['rev-parse', branch], repo),
      previousCommit: first,
    });
    // The branch moved forward: round 1's commit is in it, and so is the fix.
    expect(() => git(['merge-base', '--is-ancestor', first, branch], repo)).not.toThrow();
    expect(git(['show', `${branch}:fixed.txt`], repo)).toMatch(/^final-judgement-1\./);
    expect(view.session.integration).toMatchObject({
      round: 2,
      fixes: 1,
      verdict: { round: 2, done: true },
    });
  });

  it('fails with what is missing once integration.maxRounds is used up; a resume runs it again', async () => {
    const repo = makeRepo();
    const gate = join(tmp, 'fix-gate');
    const check = `if (process.env.ORQ_BRANCH.endsWith('/result') && !require('fs').existsSync(${JSON.stringify(gate)})) process.exit(2)`;
    const cluster = await startCluster({
      config: {
        ...commandConfig(repo, {
          checks: [{ name: 'gate', command: [process.execPath, '-e', check], mode: 'block' }],
        }),
        integration: { maxRounds: 0 },
      },
    });
    const session = await cluster.client.submit({ instruction: INSTRUCTION });
    const failed = await cluster.client.wait(session.id, { timeoutMs: 60_000 });
    expect(failed.session.state).toBe('FAILED');
    expect(failed.session.failure?.code).toBe('INTEGRATION_CHECKS_FAILED');
    expect(failed.session.failure?.reason).toMatch(
      /still lacks, after 0 fix round\(s\) of 0 \(integration\.maxRounds\): Make the check gate pass/,
    );
    expect(failed.tasks.map((t) => t.id)).toEqual(['t1', 't2', 't3']);
    const branch = `orq/${session.id}/result`;
    const first = git(['rev-parse', branch], repo);

    // The person fixes what the check wanted, then resumes: the integration runs again.
    writeFileSync(gate, '');
    await cluster.client.resume(session.id, { note: 'gate opened' }, { waitMs: 10_000 });
    const view = await cluster.client.wait(session.id, { timeoutMs: 60_000 });
    expect(view.session.state).toBe('COMPLETED');
    expect(view.session.failure).toBeUndefined();
    const history = (await cluster.client.history(session.id)).map((h) => h.entry);
    expect(sessionStates(history).slice(-3)).toEqual(['FAILED', 'INTEGRATING', 'COMPLETED']);
    expect(
      decisions(history).find((d) => d.decision === 'resume:integration')?.inputs,
    ).toMatchObject({
      round: 2,
      failure: { code: 'INTEGRATION_CHECKS_FAILED' },
    });
    // Round 2 started from round 1's result, which held every task already.
    const result = await cluster.client.result(session.id);
    expect(result.integration).toMatchObject({ previousCommit: first, commit: first });
    expect(result.integration?.tasks.every((t) => t.how === 'contained')).toBe(true);
  });

  it("holds what the final judge finds missing to the Replanner's term rules", async () => {
    const repo = makeRepo();
    const missing = {
      success: false,
      shouldContinue: false,
      shouldReplan: true,
      reason: 'the printer is not documented',
      missingRequirements: ['Document the printer in README.md'],
    };
    const done = { ...missing, success: true, shouldReplan: false, reason: 'documented' };
    const { models, calls } = recordingModels({
      tasks: {
        // The final judge of round 1 finds something missing; the task standing for it is
        // judged done once it ran itself (after the resume below).
        'final-judgement-1': {
          judgements: [missing, done],
          // Subtasks that drop "printer", a required term the missing item carries.
          replan: {
            reason: 'one step',
            tasks: [{ id: 'a', title: 'Write docs', acceptance: 'README has docs', context: 'c' }],
          },
        },
      },
    });
    const cluster = await startCluster({
      config: {
        ...commandConfig(repo),
        refinement: { treatTermLossAsStructureBreak: true },
      },
      models,
    });
    const session = await cluster.client.submit({ instruction: INSTRUCTION });
    const blocked = await cluster.client.wait(session.id, { timeoutMs: 60_000, until: 'settled' });
    expect(blocked.session.state).toBe('BLOCKED');

    // The final judge saw the instruction, its required terms and the merged diff stat.
    const final = calls.judgeTask.find((r) => r.finalJudgement);
    expect(final?.instruction).toBe(INSTRUCTION);
    expect(final?.finalJudgement).toMatchObject({
      round: 1,
      requiredTerms: ['parser', 'printer'],
      branch: `orq/${session.id}/result`,
      diffStat: expect.stringMatching(/3 files changed/),
      tasks: [{ taskId: 't1' }, { taskId: 't2' }, { taskId: 't3' }],
    });
    // The Replanner's subtasks lost "printer": refused, and the task waits for a person.
    expect(calls.replan.map((r) => r.task.id)).toEqual(['final-judgement-1']);
    const fix = blocked.tasks.find((t) => t.id === 'final-judgement-1');
    expect(fix?.state).toBe('BLOCKED');
    expect(fix?.acceptance).toBe('- Document the printer in README.md');
    let history = (await cluster.client.history(session.id)).map((h) => h.entry);
    expect(decisions(history).find((d) => d.decision === 'replan:invalid')?.reason).toMatch(
      /Required terms missing after replan: .*printer/,
    );
    expect(formatSessionTable(blocked)).toContain(
      '\nfixing: tasks for what the final judge found missing (1 item(s)) wait for a resume; then integration round 2',
    );

    // Resumed, the task runs as it is, from the result branch; round 2 merges it.
    await cluster.client.resume(session.id, {}, { waitMs: 10_000 });
    const view = await cluster.client.wait(session.id, { timeoutMs: 60_000 });
    expect(view.session.state).toBe('COMPLETED');
    history = (await cluster.client.history(session.id)).map((h) => h.entry);
    expect(
      decisions(history)
        .filter((d) => d.decision.startsWith('integration:'))
        .map((d) => d.decision),
    ).toEqual([
      'integration:start',
      'integration:merged',
      'integration:missing',
      'integration:fix',
      'integration:start',
      'integration:merged',
      'integration:done',
    ]);
    const result = await cluster.client.result(session.id);
    expect(result.integration?.tasks.at(-1)).toMatchObject({
      taskId: 'final-judgement-1',
      how: 'merged',
    });
  });

  it('can be cancelled during the final judgement, which then changes nothing', async () => {
    const repo = makeRepo();
    let release = () => {};
    const held = new Promise<void>((resolve) => (release = resolve));
    let judging = false;
    const { models } = recordingModels(
      {},
      {
        async beforeJudgeTask(request) {
          if (!request.finalJudgement) return;
          judging = true;
          await held;
        },
      },
    );
    const cluster = await startCluster({ config: commandConfig(repo), models });
    try {
      const session = await cluster.client.submit({ instruction: INSTRUCTION });
      await eventually(async () => judging || undefined, 'the final judge asked', 60_000);
      const view = await cluster.client.get(session.id);
      expect(view.session.integration?.phase).toBe('judging');
      expect(formatSessionTable(view)).toContain(
        `\nfinal judgement (round 1): the judge reviews orq/${session.id}/result at `,
      );
      expect(
        (await scanSessions(cluster.client.store.redis, cluster.prefix)).byIntegrationPhase,
      ).toMatchObject({ merging: 0, judging: 1 });

      await cluster.client.cancel(session.id, 'not needed');
      expect((await cluster.client.wait(session.id, { timeoutMs: 30_000 })).session.state).toBe(
        'CANCELLED',
      );
      release();
      await eventually(async () => {
        const all = (await cluster.client.history(session.id)).map((h) => h.entry);
        return decisions(all).find(
          (d) => d.decision === 'event:ignored' && /result-judged/.test(d.reason),
        );
      }, 'the late verdict ignored');
      expect((await cluster.client.get(session.id)).session.state).toBe('CANCELLED');
      expect(
        (await scanSessions(cluster.client.store.redis, cluster.prefix)).byIntegrationPhase,
      ).toMatchObject({ judging: 0 });
    } finally {
      release();
    }
  });

  it('fails its integration when the final verdict cannot be applied; a resume runs it again', async () => {
    const repo = makeRepo();
    const cluster = await startCluster({
      config: { ...commandConfig(repo), queues: { attempts: 2, backoffMs: 1 } },
    });
    // Every try of the coordinator's write for round 1's verdict fails (a bug, Redis refusing):
    // the event's final failure must end the integration, not leave it judging for ever.
    const store = cluster.pods[0]!.store;
    const apply = store.apply.bind(store);
    let refusing = true;
    store.apply = async (sessionId, changeset) => {
      if (refusing && changeset.eventId.startsWith('ev-result-judged|')) {
        throw new Error('verdict write refused by the test');
      }
      return apply(sessionId, changeset);
    };
    const session = await cluster.client.submit({ instruction: INSTRUCTION });
    const failed = await cluster.client.wait(session.id, { timeoutMs: 60_000 });
    expect(failed.session.state).toBe('FAILED');
    expect(failed.session.failure?.code).toBe('INTEGRATION_FAILED');
    expect(failed.session.failure?.reason).toContain('verdict write refused by the test');

    refusing = false;
    await cluster.client.resume(session.id, {}, { waitMs: 10_000 });
    const done = await cluster.client.wait(session.id, { timeoutMs: 60_000 });
    expect(done.session.state).toBe('COMPLETED');
  });

  it('asks a judge over the OpenAI protocol for the final judgement, and runs what it finds missing', async () => {
    const repo = makeRepo();
    process.env.ORQ_TEST_FINAL_JUDGE_KEY = 'sk-final-judge';
    const finals: string[] = [];
    const server = await startFakeLlmServer('openai', (request) => {
      if (request.schemaName === 'QualityJudgement') {
        return { json: { score: 95, isAcceptable: true, issues: [], suggestions: [] } };
      }
      const verdict = {
        success: true,
        shouldContinue: false,
        shouldReplan: false,
        reason: 'fine',
        missingRequirements: [] as string[],
      };
      if (!request.system.includes('You are the final judge')) return { json: verdict };
      finals.push(request.text);
      return finals.length === 1
        ? {
            json: {
              ...verdict,
              success: false,
              shouldReplan: true,
              reason: 'the printer has no test',
              missingRequirements: ['Add a test for the printer'],
            },
          }
        : { json: verdict };
    });
    try {
      const cluster = await startCluster({
        config: {
          ...commandConfig(repo),
          llm: {
            judge: {
              provider: 'openai',
              model: 'final-judge',
              baseUrl: server.baseUrl,
              apiKeyEnv: 'ORQ_TEST_FINAL_JUDGE_KEY',
            },
          },
        },
      });
      const session = await cluster.client.submit({ instruction: INSTRUCTION });
      const view = await cluster.client.wait(session.id, { timeoutMs: 90_000 });
      expect(view.session.state).toBe('COMPLETED');
      // Two final judgements: round 1 found the test missing, round 2 found it done.
      expect(finals).toHaveLength(2);
      expect(finals[0]).toContain(INSTRUCTION);
      expect(finals[0]).toContain('Required terms (from the instruction): 「parser」, 「printer」');
      expect(finals[0]).toMatch(/3 files changed, 3 insertions\(\+\)/);
      expect(finals[0]).toContain(`Result branch \`orq/${session.id}/result\``);
      const added = view.tasks.filter((t) => t.id.startsWith('final-judgement-1'));
      expect(added.map((t) => t.state)).toEqual(['REPLACED_BY_REPLAN', 'DONE', 'DONE']);
      expect(added[0]?.acceptance).toBe('- Add a test for the printer');
      expect(view.session.integration).toMatchObject({
        round: 2,
        fixes: 1,
        verdict: { round: 2, done: true },
      });
      const files = git(['ls-tree', '--name-only', `orq/${session.id}/result`], repo).split('\n');
      expect(files).toEqual(expect.arrayContaining(added.slice(1).map((t) => `${t.id}.txt`)));
    } finally {
      await server.close();
      delete process.env.ORQ_TEST_FINAL_JUDGE_KEY;
    }
  });

  it('resumes with a higher budget when the budget stopped it in its final judgement', async () => {
    const repo = makeRepo();
    // Every call before the final judge fits; the final judge's reservation does not. What the
    // builtin provider's calls cost is fixed by their prompts (no ids in them): measured.
    const { models, calls } = recordingModels({});
    const cluster = await startCluster({
      config: {
        ...commandConfig(repo),
        budget: { maxTokens: BUDGET_PROBE.maxTokens, reserveTokensPerCall: BUDGET_PROBE.reserve },
      },
      models,
    });
    const session = await cluster.client.submit({ instruction: INSTRUCTION });
    const stopped = await cluster.client.wait(session.id, { timeoutMs: 60_000 });
    expect(stopped.session.state).toBe('BUDGET_EXHAUSTED');
    expect(stopped.session.integration?.phase).toBe('judging');
    expect(calls.judgeTask.some((r) => r.finalJudgement)).toBe(false);

    await cluster.client.resume(
      session.id,
      { budget: { maxTokens: BUDGET_PROBE.maxTokens * 10 } },
      { waitMs: 10_000 },
    );
    const view = await cluster.client.wait(session.id, { timeoutMs: 60_000 });
    expect(view.session.state).toBe('COMPLETED');
    const history = (await cluster.client.history(session.id)).map((h) => h.entry);
    expect(sessionStates(history).slice(-3)).toEqual([
      'BUDGET_EXHAUSTED',
      'INTEGRATING',
      'COMPLETED',
    ]);
    expect(view.session.integration).toMatchObject({ round: 2, verdict: { done: true } });
  });

  it('gives a task named result a branch of its own, apart from the result branch', async () => {
    const repo = makeRepo();
    const plan = {
      summary: 'two tasks, one named result',
      tasks: [
        { id: 'result', title: 'Write the parser', acceptance: 'parser written', context: 'c' },
        { id: 'printer', title: 'Write the printer', acceptance: 'printer written', context: 'c' },
      ],
    };
    const cluster = await startCluster({
      config: commandConfig(repo),
      models: recordingModels({ plans: [plan] }).models,
    });
    const session = await cluster.client.submit({ instruction: INSTRUCTION });
    const view = await cluster.client.wait(session.id, { timeoutMs: 60_000 });
    expect(view.session.state).toBe('COMPLETED');
    const task = taskBranchName(session.id, 'result');
    expect(task).toMatch(new RegExp(`^orq/${session.id}/result-task-[0-9a-f]{8}$`));
    const branch = `orq/${session.id}/result`;
    expect(git(['ls-tree', '--name-only', branch], repo).split('\n')).toEqual([
      'README.md',
      'printer.txt',
      'result.txt',
      'shared.txt',
    ]);
    expect(() => git(['merge-base', '--is-ancestor', task, branch], repo)).not.toThrow();
  });

  it('leaves a session without git work as it was: it completes with no integration', async () => {
    const cluster = await startCluster();
    const session = await cluster.client.submit({ instruction: INSTRUCTION });
    const view = await cluster.client.wait(session.id, { timeoutMs: 30_000 });
    expect(view.session.state).toBe('COMPLETED');
    expect(view.session.integration).toBeUndefined();
    const history = (await cluster.client.history(session.id)).map((h) => h.entry);
    expect(sessionStates(history)).not.toContain('INTEGRATING');
    expect((await cluster.client.result(session.id)).integration).toBeUndefined();
  });
});
