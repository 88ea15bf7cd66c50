import { describe, expect, it } from 'vitest';
import type { IntegrationOutcome } from '../../src/shared/domain/integration.js';
import type { TaskJudgement } from '../../src/shared/domain/task.js';
import { createBuiltinModels } from '../../src/workers/llm/builtin.js';
import {
  finalJudgementInput,
  finalVerdict,
  fixTask,
  resultTask,
} from '../../src/shared/rules/final-judgement.js';
import { integrationPhaseLine } from '../../src/shared/rules/session-result.js';

const outcome = (checks: IntegrationOutcome['checks'] = []): IntegrationOutcome => ({
  status: checks.some((c) => !c.passed && c.mode !== 'warn') ? 'checks-failed' : 'merged',
  repository: '/repo',
  branch: 'orq/s1/result',
  commit: 'c0ffee0123456789',
  baseCommit: 'base',
  strategy: 'merge',
  tasks: [{ taskId: 't1', title: 'Parser', branch: 'orq/s1/t1', commit: 'a', how: 'merged' }],
  diffStat: ' parser.ts | 3 +++\n 1 file changed, 3 insertions(+)',
  checks,
  resolved: [],
});
const failing = {
  name: 'test',
  mode: 'block' as const,
  passed: false,
  exitCode: 1,
  output: 'boom',
};
const verdictOf = (judgement: Partial<TaskJudgement>): TaskJudgement => ({
  success: false,
  shouldContinue: false,
  shouldReplan: true,
  reason: 'r',
  missingRequirements: [],
  ...judgement,
});

describe('the final verdict on a result branch', () => {
  it('is done when the judge says so and no blocking check failed', () => {
    const warned = { ...failing, mode: 'warn' as const };
    expect(finalVerdict(verdictOf({ success: true, reason: 'ok' }), outcome([warned]), 1)).toEqual({
      round: 1,
      done: true,
      reason: 'ok',
      missing: [],
    });
  });

  it('is not done while a blocking check fails, whatever the judge says, and names the check', () => {
    const verdict = finalVerdict(verdictOf({ success: true, reason: 'ok' }), outcome([failing]), 2);
    expect(verdict.done).toBe(false);
    expect(verdict.reason).toMatch(/the judge found it done, but check\(s\) test fail/);
    expect(verdict.missing).toEqual(['Make the check test pass on the merged tree (exit code 1)']);
  });

  it("keeps the judge's list, adding only the failing checks it did not name", () => {
    const judged = verdictOf({
      missingRequirements: ['Document the parser', 'Fix test: 1 failing'],
    });
    expect(finalVerdict(judged, outcome([failing]), 1).missing).toEqual([
      'Document the parser',
      'Fix test: 1 failing',
    ]);
  });

  it('names the reason as missing when the judge says not done but lists nothing', () => {
    expect(finalVerdict(verdictOf({ reason: 'too thin' }), outcome(), 1).missing).toEqual([
      'What the final judge found wanting: too thin',
    ]);
  });
});

describe('the task for what is missing', () => {
  it('goes to the Replanner with the missing items as its acceptance and the check output as context', () => {
    const judged = verdictOf({ missingRequirements: ['Document the parser'] });
    const verdict = finalVerdict(judged, outcome([failing]), 1);
    const task = fixTask(verdict, outcome([failing]), judged, 3);
    expect(task).toMatchObject({
      id: 'final-judgement-1',
      state: 'RUNNING',
      attempts: 1,
      replanPending: true,
      judgement: judged,
      replanningInfo: { iteration: 0, maxIterations: 3 },
    });
    expect(task.acceptance).toBe(
      '- Document the parser\n- Make the check test pass on the merged tree (exit code 1)',
    );
    expect(task.context).toContain('orq/s1/result at c0ffee012345');
    expect(task.context).toContain('1 file changed, 3 insertions(+)');
    expect(task.context).toContain('Check test (block), exit code 1:\nboom');
  });
});

describe("the builtin provider's final judgement", () => {
  const judge = async (checks: IntegrationOutcome['checks']) => {
    const models = createBuiltinModels();
    const merged = outcome(checks);
    return (
      await models.judgeTask({
        sessionId: 's1',
        instruction: 'Write the parser',
        task: resultTask('Write the parser', merged, 1),
        attempt: 1,
        result: {
          output: '',
          log: '',
          artifacts: [],
          tokenUsage: { inputTokens: 0, outputTokens: 0 },
          durationMs: 0,
        },
        finalJudgement: finalJudgementInput(merged, 1, ['parser']),
      })
    ).value;
  };

  it('says done when every blocking check passed', async () => {
    expect((await judge([])).success).toBe(true);
  });

  it('asks for a replan naming each failing blocking check', async () => {
    expect(await judge([failing])).toMatchObject({
      success: false,
      shouldReplan: true,
      missingRequirements: ['Make the check test pass on the merged tree: boom'],
    });
  });
});

describe('the integration phase line', () => {
  const session = (state: string, phase: string) => ({
    id: 's1',
    state,
    integration: {
      round: 2,
      phase,
      outcome: { commit: 'c0ffee0123456789' },
      verdict: { missing: ['a', 'b'] },
    },
  });

  it('names each phase while the integration is under way', () => {
    expect(integrationPhaseLine(session('INTEGRATING', 'merging'))).toBe(
      'integrating (round 2): merging the task branches into orq/s1/result and running the checks there',
    );
    expect(integrationPhaseLine(session('INTEGRATING', 'judging'))).toBe(
      'final judgement (round 2): the judge reviews orq/s1/result at c0ffee012345',
    );
    expect(integrationPhaseLine(session('RUNNING', 'resolving'))).toMatch(/^resolving conflicts:/);
    expect(integrationPhaseLine(session('RUNNING', 'fixing'))).toMatch(
      /^fixing: tasks for what the final judge found missing \(2 item\(s\)\) run; then integration round 2$/,
    );
  });

  it('says nothing once the session ended', () => {
    expect(integrationPhaseLine(session('COMPLETED', 'judging'))).toBeUndefined();
  });
});
