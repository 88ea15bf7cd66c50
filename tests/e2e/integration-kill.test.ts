import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  realpathSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, inject, it } from 'vitest';
import { startCluster, type TestCluster } from '../support/cluster.js';
import { taskWorkspacePath } from '../../src/workers/executors/workspace-dir.js';
import { git } from '../support/git.js';
import { exited, Pods, queueEnv } from '../support/pods.js';
import { eventually } from '../support/scenarios.js';

/** Locks of the worker pod the test kills: its integrate job is redelivered soon after. */
const DOOMED_LOCKS = { lockDurationMs: 4_000, stalledIntervalMs: 1_000 };

let tmp: string;
let cluster: TestCluster | undefined;
let pods: Pods | undefined;
beforeAll(() => {
  tmp = realpathSync(mkdtempSync(join(tmpdir(), 'orq-integration-kill-')));
});
afterEach(async () => {
  await pods?.stopAll();
  pods = undefined;
  await cluster?.close();
  cluster = undefined;
});
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

describe('kill -9 of the worker pod in the middle of an integration merge', () => {
  it('leaves nothing the next pod trips on: it merges again and writes one result branch', async () => {
    const repo = join(tmp, 'repo');
    mkdirSync(repo);
    git(['init', '-q'], repo);
    git(['config', 'user.name', 'orq-test'], repo);
    git(['config', 'user.email', 'orq-test@example.com'], repo);
    writeFileSync(join(repo, 'package-lock.json'), '{}\n');
    git(['add', '-A'], repo);
    git(['commit', '-q', '-m', 'initial'], repo);

    // t1 and t2 (side by side) both change the lockfile: their merge conflicts there, and the
    // resolver runs in the middle of it. The first one hangs until the gate file exists.
    const agent = [
      "const fs = require('fs');",
      'const taskId = process.argv[1];',
      "if (taskId !== 't3') fs.writeFileSync('package-lock.json', JSON.stringify({ [taskId]: 1 }) + '\\n');",
      "fs.writeFileSync(taskId + '.txt', taskId + '\\n');",
    ].join('\n');
    const gate = join(tmp, 'gate');
    const pidfile = join(tmp, 'resolver.pid');
    const resolver = [
      "const fs = require('fs');",
      `if (!fs.existsSync(${JSON.stringify(gate)})) {`,
      `  fs.writeFileSync(${JSON.stringify(pidfile)}, String(process.pid));`,
      '  setInterval(() => {}, 1000);',
      "} else fs.writeFileSync('package-lock.json', '{\"merged\":true}\\n');",
    ].join('\n');
    cluster = await startCluster({
      roles: ['planner', 'judge', 'replanner', 'coordinator'],
      config: {
        execution: {
          defaultExecutor: 'command',
          workspaceRoot: join(tmp, 'ws'),
          command: {
            template: [process.execPath, '-e', agent, '{{taskId}}'],
            repository: repo,
          },
        },
        integration: {
          resolvers: [
            { files: ['package-lock.json'], command: [process.execPath, '-e', resolver] },
          ],
        },
      },
    });
    pods = new Pods({ REDIS_URL: inject('redisUrl'), ORQ_PREFIX: cluster.prefix });
    const doomed = await pods.start('worker', [], queueEnv(DOOMED_LOCKS));
    const session = await cluster.client.submit({
      instruction: 'Write the parser and write the printer',
    });
    await eventually(() => existsSync(pidfile) || undefined, 'the resolver running', 60_000);
    const path = taskWorkspacePath(join(tmp, 'ws'), session.id, '@integration-1');
    // In the middle of the merge of t2: its worktree holds MERGE_HEAD.
    const t2 = git(['rev-parse', `orq/${session.id}/t2`], repo);
    expect(git(['rev-parse', '--verify', 'MERGE_HEAD'], path)).toBe(t2);

    doomed.kill('SIGKILL');
    expect(await exited(doomed)).toBe('SIGKILL');
    // The resolver dies with the pod's host, as it would with the pod's container.
    process.kill(-Number(readFileSync(pidfile, 'utf8')), 'SIGKILL');
    writeFileSync(gate, '');

    await pods.start('worker', [], queueEnv({ stalledIntervalMs: 1_000 }));
    const view = await cluster.client.wait(session.id, { timeoutMs: 60_000 });
    expect(view.session.state).toBe('COMPLETED');
    const branch = `orq/${session.id}/result`;
    const result = await cluster.client.result(session.id);
    expect(result.integration).toMatchObject({
      status: 'merged',
      commit: git(['rev-parse', branch], repo),
    });
    expect(result.integration?.tasks.map((t) => [t.taskId, t.how])).toEqual([
      ['t1', 'merged'],
      ['t2', 'resolved'],
      ['t3', 'merged'],
    ]);
    expect(git(['show', `${branch}:package-lock.json`], repo)).toBe('{"merged":true}');
    // One merge per task on the branch's own line; the dead pod's worktree is gone.
    expect(
      git(['rev-list', '--merges', '--first-parent', '--count', `main..${branch}`], repo),
    ).toBe('3');
    expect(existsSync(path)).toBe(false);
    expect(
      git(['worktree', 'list', '--porcelain'], repo)
        .split('\n')
        .filter((l) => l.startsWith('worktree ')),
    ).toHaveLength(1);
  }, 120_000);
});
