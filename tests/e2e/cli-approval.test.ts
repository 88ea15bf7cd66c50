import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import { orq } from '../support/cli.js';
import { startCluster, type TestCluster } from '../support/cluster.js';
import { tempFilesPerFile } from '../support/temp-files.js';

// A person answering a plan approval from the CLI (issue 48): separate processes pointed at the
// roles, which run in this test process, through REDIS_URL and ORQ_PREFIX.

const temp = tempFilesPerFile('orq-cli-approval-');
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

/** `orq submit` with approval.plan required, waited for until its plan waits. */
async function submitWaiting(): Promise<string> {
  const submit = await cli(
    'submit',
    '認証機能とバリデーションを実装して',
    '--session-config',
    JSON.stringify({ approval: { plan: 'required' } }),
  );
  expect(submit.code, submit.stderr).toBe(0);
  const id = submit.stdout.trim();
  const view = await cluster.client.wait(id, { timeoutMs: 20_000 });
  expect(view.session.state).toBe('AWAITING_APPROVAL');
  return id;
}

describe('plan approval from the CLI', () => {
  it('shows the waiting plan in status, lists the session as waiting, and approves it', async () => {
    const id = await submitWaiting();
    const status = await cli('status', id);
    expect(status.stdout).toContain('AWAITING_APPROVAL');
    expect(status.stdout).toContain('waiting for a person: plan approval plan-0');
    expect(status.stdout).toContain(`orq approve ${id}`);
    const list = await cli('status');
    expect(list.stdout).toMatch(new RegExp(`waiting for a person \\(\\d+\\):[\\s\\S]*${id}`));

    const approved = await cli('approve', id, '--wait', 'plan-0');
    expect(approved.code, approved.stderr).toBe(0);
    expect(approved.stdout).toBe(`approved plan-0 of ${id}\n`);
    const view = await cluster.client.wait(id, { timeoutMs: 20_000 });
    expect(view.session.state).toBe('COMPLETED');

    // Twice: the wait has ended, and the CLI says so with the WAIT_ENDED code.
    const again = await cli('approve', id);
    expect(again.code).not.toBe(0);
    expect(again.stderr).toContain('waits for nobody now');
    const history = await cli('history', id);
    expect(history.stdout).toContain('plan approval (plan-0) approved by cli');
  });

  it('rejects with feedback, and the session plans again', async () => {
    const id = await submitWaiting();
    const rejected = await cli('reject', id, '--feedback', 'add a review task');
    expect(rejected.code, rejected.stderr).toBe(0);
    const view = await cluster.client.wait(id, { timeoutMs: 20_000 });
    expect(view.session.state).toBe('AWAITING_APPROVAL');
    expect(view.session.wait?.id).toBe('plan-1');
  });

  it('prints the plan as YAML and runs an edit of it, refusing one that drops a required term', async () => {
    const id = await submitWaiting();
    const printed = await cli('plan', id);
    expect(printed.code, printed.stderr).toBe(0);
    const plan = parseYaml(printed.stdout) as { tasks: { id: string; title: string }[] };
    expect(plan.tasks.length).toBeGreaterThan(0);

    const { dir } = temp;
    const dropped = join(dir, 'dropped.yaml');
    writeFileSync(
      dropped,
      'tasks:\n  - id: only\n    title: something else\n    acceptance: done\n',
    );
    const refused = await cli('edit', id, dropped);
    expect(refused.code).toBe(2);
    expect(refused.stderr).toContain('drops required terms');

    const file = join(dir, 'plan.yaml');
    plan.tasks.push({
      id: 'review',
      title: 'Review the 認証 work',
      acceptance: 'signed off',
    } as never);
    writeFileSync(file, JSON.stringify(plan));
    const edited = await cli('edit', id, file, '--wait', 'plan-0');
    expect(edited.code, edited.stderr).toBe(0);
    const view = await cluster.client.wait(id, { timeoutMs: 20_000 });
    expect(view.session.state).toBe('COMPLETED');
    expect(view.tasks.map((t) => t.id)).toContain('review');
  });

  it('creates a tenant key with the answer right, and lists it with the right', async () => {
    const created = await cli('keys', 'create', 'acme', '--may-answer', '--label', 'approver');
    expect(created.code, created.stderr).toBe(0);
    expect(created.stdout).toMatch(/^orq_[a-f0-9]{12}_/);
    const listed = await cli('keys', 'list', '--json');
    const records = JSON.parse(listed.stdout) as { tenant: string; rights: string[] }[];
    expect(records).toEqual([expect.objectContaining({ tenant: 'acme', rights: ['answer'] })]);
    expect((await cli('keys', 'list')).stdout).toContain('[answer]');
  });
});
