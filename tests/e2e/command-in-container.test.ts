import { mkdirSync, realpathSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { randomUUID } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { beforeAll, describe, expect, inject, it } from 'vitest';
import { root } from '../support/cli.js';
import { git } from '../support/git.js';
import { tempFilesPerFile } from '../support/temp-files.js';
import {
  hasImage,
  noContainerEngine,
  pullImage,
  runOnce,
  type OneShot,
} from '../support/containers.js';

// The command executor as a pod runs it (issue 45): `orq run` inside a container of a base
// image with node and git, as its user, with an empty HOME and no git config anywhere (no
// /etc/gitconfig, none in HOME, none in the repository, none in the environment). Its commits
// must land as orq's fallback identity. The machines the tests run on are no such pod.
//
// The image: ORQ_TEST_NODE_IMAGE, else orq-test-node:local (scripts/test-images.sh, as CI builds
// it), else node:20 (official, with git). Without a container engine, or one that cannot get the
// image, the test says so and is skipped, as on a machine with only redis-server; CI asks for containers
// (ORQ_TEST_REDIS_SERVERS=container), where a missing engine fails the run instead.

const temp = tempFilesPerFile('orq-in-container-');
const FAKE_AGENT = fileURLToPath(new URL('../fixtures/fake-coding-agent.mjs', import.meta.url));
const ORQ = 'orq <orq@localhost>|orq <orq@localhost>';

let image = '';
let engine: string | undefined;
beforeAll(async () => {
  engine = await noContainerEngine();
  if (engine) return;
  image =
    process.env.ORQ_TEST_NODE_IMAGE ??
    ((await hasImage('orq-test-node:local')) ? 'orq-test-node:local' : 'node:20');
  // An image the engine cannot get (not built here, no registry) is no engine for this test,
  // unless the run asked for containers (CI), where the pull's error fails it below.
  if (process.env.ORQ_TEST_REDIS_SERVERS !== 'container') {
    const refused = await pullImage(image);
    if (refused)
      engine = `the engine cannot get ${image} (${refused}); scripts/test-images.sh builds one`;
  }
});

/** One run of `command` in the image, as the host's user, with what a bare pod has. */
function inPod(workdir: string, command: string[]): Promise<OneShot> {
  // The CLI as the tests build it: <dir>/dist/producers/cli/main.js, <dir>/node_modules.
  const cliDir = join(dirname(inject('cliMain')), '../../..');
  // The CLI's node_modules is a link to the repository's, which may be a link itself.
  const modules = realpathSync(join(root, 'node_modules'));
  return runOnce({
    image,
    runId: inject('redisServers').runId,
    command,
    workdir,
    user: `${process.getuid?.() ?? 1000}:${process.getgid?.() ?? 1000}`,
    // An empty HOME of its own: no ~/.gitconfig, nothing the host has.
    env: { HOME: '/home/empty', REDIS_URL: inject('redisUrl') },
    tmpfs: ['/home/empty'],
    mounts: [
      { source: workdir, target: workdir, mode: 'rw' },
      { source: cliDir, target: cliDir, mode: 'ro' },
      { source: modules, target: join(root, 'node_modules'), mode: 'ro' },
      { source: dirname(FAKE_AGENT), target: dirname(FAKE_AGENT), mode: 'ro' },
    ],
  });
}

describe('the command executor in a container with no git identity anywhere', () => {
  it("orq run commits each task's work, the run records and the result as orq <orq@localhost>", async (ctx) => {
    if (engine !== undefined) {
      const why = `needs a container engine (Docker) with a node image: ${engine}`;
      console.warn(`command-in-container: skipped, ${why}`);
      ctx.skip(why);
    }
    const work = join(temp.dir, randomUUID().slice(0, 8));
    const repo = join(work, 'repo');
    mkdirSync(repo, { recursive: true });
    // The test's own commit names an identity on its command line only (tests/support/git.ts).
    git(['init', '-q'], repo);
    writeFileSync(join(repo, 'README.md'), '# project\n');
    git(['add', '-A'], repo);
    git(['commit', '-q', '-m', 'initial'], repo);

    // git itself finds no identity there: what orq must make up for.
    const bare = await inPod(work, ['git', '-C', repo, 'var', 'GIT_AUTHOR_IDENT']);
    expect(bare.code, bare.output).not.toBe(0);
    expect(bare.output).toMatch(/Author identity unknown|unable to auto-detect email address/);

    const config = {
      execution: {
        defaultExecutor: 'command',
        workspaceRoot: join(work, 'workspaces'),
        // The agent commits its own work, as aider does, with whatever identity git has.
        command: {
          repository: repo,
          template: ['node', FAKE_AGENT, '--commit-as-is', '{{prompt}}'],
        },
      },
    };
    const run = await inPod(work, [
      'node',
      inject('cliMain'),
      'run',
      '--session-config',
      JSON.stringify(config),
      'Write the parser and write the printer',
    ]);
    expect(run.code, run.output).toBe(0);
    expect(run.output).toContain('COMPLETED');

    const branches = git(['for-each-ref', '--format=%(refname:short)', 'refs/heads/orq/'], repo)
      .split('\n')
      .filter(Boolean);
    const tasks = branches.filter((b) => !b.endsWith('/result'));
    expect(tasks.length, branches.join('\n')).toBeGreaterThanOrEqual(2);
    const identity = (rev: string) => git(['log', '-1', '--format=%an <%ae>|%cn <%ce>', rev], repo);
    for (const branch of tasks) expect(identity(branch), branch).toBe(ORQ);
    // Those are the agent's own commits, which git took with orq's fallback identity.
    for (const branch of tasks) {
      expect(git(['log', '-1', '--format=%s', branch], repo), branch).toMatch(/^fake agent: /);
    }
    // The run records, which the pod failed to write (a commit-tree with no identity).
    const records = git(['for-each-ref', '--format=%(refname)', 'refs/orq/'], repo)
      .split('\n')
      .filter((ref) => ref.includes('/agent-run-'));
    expect(records.length).toBeGreaterThanOrEqual(tasks.length);
    for (const record of records) expect(identity(record), record).toBe(ORQ);
    // The merges into the one result branch are orq's too.
    const result = branches.find((b) => b.endsWith('/result'));
    expect(result, branches.join('\n')).toBeDefined();
    expect(identity(result!)).toBe(ORQ);
  }, 120_000);
});
