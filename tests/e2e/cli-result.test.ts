import { randomUUID } from 'node:crypto';
import { resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { SessionResult } from '../../src/shared/domain/result.js';
import { orq, root } from '../support/cli.js';
import { startCluster, type TestCluster } from '../support/cluster.js';

// `orq result` and the result `orq run` ends with, as a user runs them: separate processes on
// the test Redis, with the roles in this test process (or, for `orq run`, in the CLI's own).

const scenario = (name: string) => resolve(root, 'examples/scenarios', name);

/** What `orq result` says first of a session the builtin provider ran (every one here). */
const NO_MODEL =
  'No model ran this session: the builtin provider (a rule set, not an LLM) planned, judged and executed it. See docs/providers.md to use a model.';

let cluster: TestCluster;
let env: Record<string, string>;
const cli = (...args: string[]) => orq(args, { env });

beforeAll(async () => {
  cluster = await startCluster();
  env = { REDIS_URL: inject('redisUrl'), ORQ_PREFIX: cluster.prefix };
});
afterAll(async () => {
  await cluster?.close();
});

describe('orq run', () => {
  it('ends with the result after the final table', async () => {
    // Its own prefix: the roles of `orq run` take the session, not the test's.
    const own = { ...env, ORQ_PREFIX: `r${randomUUID().slice(0, 8)}` };
    const run = await orq(
      ['run', 'Login with validation', '--scenario', scenario('replan-task.yaml')],
      { env: own },
    );
    expect(run.code, run.stderr).toBe(0);
    const [table, result] = run.stdout.split('\nresult:\n');
    expect(table).toMatch(/TASK\s+STATE/);
    // Said before the text: no model made it.
    const [note, text] = (result ?? '').split('\n\n');
    expect(note).toBe(`note: ${NO_MODEL}`);
    // t2 was replanned: its last subtask's output alone is the result, no section per task.
    expect(text).toMatch(/^Done: Validate the login input/);
    expect(text).not.toContain('## ');
    // The same as `orq result` gives later, the note on stderr.
    const id = /session (\S+) submitted/.exec(run.stdout)?.[1] ?? '';
    const later = await orq(['result', id], { env: own });
    expect(later.code, later.stderr).toBe(0);
    expect(later.stdout).toBe(text);
    expect(later.stderr).toBe(`orq: ${NO_MODEL}\n`);
  });

  it('says once on stderr that no model runs it, and the setting a key that is set would need; --json keeps stdout JSON', async () => {
    const own = {
      ...env,
      ORQ_PREFIX: `r${randomUUID().slice(0, 8)}`,
      // A key a newcomer exported for other tools: orq must say it goes unused.
      OPENAI_API_KEY: 'sk-exported-for-another-tool',
    };
    const run = await orq(['run', '認証機能とバリデーションを実装して', '--json'], { env: own });
    expect(run.code, run.stderr).toBe(0);
    const view = JSON.parse(run.stdout) as { session: { id: string }; ranByBuiltin: boolean };
    expect(view.ranByBuiltin).toBe(true);
    const said = run.stderr.split('\n').filter((line) => line.includes('model'));
    expect(said).toEqual([
      'orq: no model configured: the builtin provider (a rule set, not an LLM) plans, judges and runs this; see docs/providers.md to use a model',
      'orq: OPENAI_API_KEY is set but unused: to use it, set ORQ__llm__default__provider=openai ORQ__llm__default__model=gpt-4o-mini (or llm.default in orq.config.yaml; docs/providers.md)',
    ]);
    expect(run.stderr).not.toContain('sk-exported');

    const result = await orq(['result', view.session.id, '--json'], { env: own });
    expect(SessionResult.parse(JSON.parse(result.stdout)).ranByBuiltin).toBe(true);
  });
});

describe('orq result', () => {
  it('prints the text of a completed session alone on stdout, and the whole result with --json', async () => {
    const { id } = await cluster.client.submit({
      instruction: 'Add a search feature',
      config: { llm: { scenario: scenario('diamond.yaml') } },
    });
    const view = await cluster.client.wait(id, { timeoutMs: 30_000 });
    expect(view.session.state).toBe('COMPLETED');

    const text = await cli('result', id);
    expect(text.code, text.stderr).toBe(0);
    // A scenario scripts the builtin provider: still no model.
    expect(text.stderr).toBe(`orq: ${NO_MODEL}\n`);
    expect(text.stdout).toBe(`${view.tasks.find((t) => t.id === 'D')?.result?.output.trimEnd()}\n`);

    const json = await cli('result', id, '--json');
    expect(json.code, json.stderr).toBe(0);
    const result = SessionResult.parse(JSON.parse(json.stdout));
    expect(result).toMatchObject({ sessionId: id, complete: true, missing: [] });
    expect(result.outputs.map((o) => o.taskId)).toEqual(['D']);
  });

  it('prints what a blocked session did, says on stderr what is missing, and exits 1', async () => {
    const { id } = await cluster.client.submit({
      instruction: 'Deploy the service',
      config: { llm: { scenario: scenario('blocked-task.yaml') } },
    });
    const view = await cluster.client.wait(id, { timeoutMs: 30_000 });
    expect(view.session.state).toBe('BLOCKED');

    const partial = await cli('result', id);
    expect(partial.code).toBe(1);
    expect(partial.stdout).toBe(
      `${view.tasks.find((t) => t.id === 't1')?.result?.output.trimEnd()}\n`,
    );
    expect(partial.stderr).toBe(
      `orq: ${NO_MODEL}\n` +
        `orq: Session ${id} is BLOCKED (1 of 3 tasks finished): t2 waits for a resume.\n` +
        'orq: No output from t3 (READY): the result holds the nearest done task before, t1.\n',
    );
  });

  it('refuses a session still planning unless --partial, and an unknown session', async () => {
    // A prefix no roles run on: the session stays PLANNING.
    const idle = { ...env, ORQ_PREFIX: `i${randomUUID().slice(0, 8)}` };
    const submit = await orq(['submit', 'Not yet'], { env: idle });
    expect(submit.code, submit.stderr).toBe(0);
    const id = submit.stdout.trim();

    const refused = await orq(['result', id], { env: idle });
    expect(refused.code).toBe(1);
    expect(refused.stdout).toBe('');
    expect(refused.stderr).toContain(`orq: session ${id} is PLANNING: its result is not final yet`);
    expect(refused.stderr).toContain(`orq result ${id} --partial`);

    const partial = await orq(['result', id, '--partial'], { env: idle });
    expect(partial.code).toBe(1);
    expect(partial.stdout).toBe('');
    expect(partial.stderr).toBe(
      `orq: ${NO_MODEL}\norq: Session ${id} is still planning: no task has run yet.\n`,
    );

    const unknown = await cli('result', 'no-such-session');
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toContain('Session no-such-session not found');
  });
});
