import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { mkdirSync, mkdtempSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { PullRequestConfig } from '../../src/shared/config/schema.js';
import { openPullRequest } from '../../src/workers/integration/pull-request.js';
import { clusterPerTest } from '../support/cluster.js';
import { git } from '../support/git.js';
import { recordingModels } from '../support/scenarios.js';

const FAKE_AGENT = fileURLToPath(new URL('../fixtures/fake-coding-agent.mjs', import.meta.url));

interface Opened {
  head: string;
  base: string;
  title: string;
  body: string;
  number: number;
}

/**
 * The part of GitHub's REST API (pulls) or GitLab's (merge_requests) orq uses, on a free port:
 * one request per head branch, a second create refused as GitHub (422) and GitLab (409) do.
 * Every create is counted, and each call's token kept.
 */
async function fakeForge(kind: 'github' | 'gitlab') {
  const opened: Opened[] = [];
  const tokens: string[] = [];
  let creates = 0;
  const read = (req: IncomingMessage) =>
    new Promise<Record<string, string>>((resolve) => {
      let text = '';
      req.on('data', (c: Buffer) => (text += c.toString()));
      req.on('end', () => resolve(text ? (JSON.parse(text) as Record<string, string>) : {}));
    });
  const view = (pr: Opened) =>
    kind === 'github'
      ? { number: pr.number, html_url: `https://forge.test/o/r/pull/${pr.number}` }
      : { iid: pr.number, web_url: `https://forge.test/g/p/-/merge_requests/${pr.number}` };
  const server: Server = createServer((req, res) => {
    void (async () => {
      tokens.push(String(req.headers.authorization ?? req.headers['private-token'] ?? ''));
      const url = new URL(req.url ?? '/', 'http://x');
      const path =
        kind === 'github'
          ? '/repos/o/r/pulls'
          : `/projects/${encodeURIComponent('g/p')}/merge_requests`;
      if (url.pathname !== path && decodeURIComponent(url.pathname) !== decodeURIComponent(path)) {
        res.writeHead(404).end('{}');
        return;
      }
      if (req.method === 'GET') {
        const head =
          kind === 'github'
            ? url.searchParams.get('head')?.replace(/^o:/, '')
            : url.searchParams.get('source_branch');
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify(opened.filter((p) => p.head === head).map(view)));
        return;
      }
      const body = await read(req);
      creates += 1;
      const head = (kind === 'github' ? body.head : body.source_branch) ?? '';
      if (opened.some((p) => p.head === head)) {
        res.writeHead(kind === 'github' ? 422 : 409).end('{"message":"already exists"}');
        return;
      }
      const pr: Opened = {
        head,
        base: (kind === 'github' ? body.base : body.target_branch) ?? '',
        title: body.title ?? '',
        body: (kind === 'github' ? body.body : body.description) ?? '',
        number: opened.length + 1,
      };
      opened.push(pr);
      res.writeHead(201, { 'content-type': 'application/json' });
      res.end(JSON.stringify(view(pr)));
    })();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    opened,
    tokens,
    creates: () => creates,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

let tmp: string;
beforeAll(() => {
  tmp = realpathSync(mkdtempSync(join(tmpdir(), 'orq-pr-')));
});
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

let count = 0;
/** A repository with an `origin` (a bare repository) and a result branch to push. */
function repoWithRemote(): { repo: string; remote: string } {
  const remote = join(tmp, `remote${++count}.git`);
  const repo = join(tmp, `repo${count}`);
  git(['init', '-q', '--bare', remote], tmp);
  mkdirSync(repo);
  git(['init', '-q'], repo);
  git(['config', 'user.name', 'orq-test'], repo);
  git(['config', 'user.email', 'orq-test@example.com'], repo);
  writeFileSync(join(repo, 'README.md'), '# project\n');
  git(['add', '-A'], repo);
  git(['commit', '-q', '-m', 'initial'], repo);
  git(['remote', 'add', 'origin', remote], repo);
  git(['push', '-q', 'origin', 'main'], repo);
  return { repo, remote };
}

let forge: Awaited<ReturnType<typeof fakeForge>> | undefined;
afterEach(async () => {
  await forge?.close();
  forge = undefined;
});

describe('the pull request of a result branch', () => {
  const startCluster = clusterPerTest();
  for (const kind of ['github', 'gitlab'] as const) {
    it(`is opened once on ${kind}, however many deliveries ask, and the branch pushed`, async () => {
      forge = await fakeForge(kind);
      const { repo, remote } = repoWithRemote();
      git(['branch', 'orq/s1/result', 'main'], repo);
      const variable = `ORQ_TEST_FORGE_TOKEN_${kind.toUpperCase()}`;
      process.env[variable] = 'secret-token';
      const ask = {
        config: PullRequestConfig.parse({
          provider: kind,
          project: kind === 'github' ? 'o/r' : 'g/p',
          apiUrl: forge.url,
          tokenEnv: variable,
        }),
        repository: repo,
        branch: 'orq/s1/result',
        baseBranch: 'main',
        title: 'Write the parser',
        body: 'Write the parser\n\n- t1: Write the parser',
      };
      // Two deliveries racing, then one more later.
      const [first, second] = await Promise.all([openPullRequest(ask), openPullRequest(ask)]);
      const third = await openPullRequest(ask);

      expect(forge.opened).toHaveLength(1);
      expect(forge.opened[0]).toMatchObject({
        head: 'orq/s1/result',
        base: 'main',
        title: 'Write the parser',
        body: 'Write the parser\n\n- t1: Write the parser',
      });
      expect(second).toEqual(first);
      expect(third).toEqual(first);
      expect(first).toMatchObject({ provider: kind, number: 1 });
      // The later delivery found it: it asked to open none.
      expect(forge.creates()).toBeLessThanOrEqual(2);
      expect(new Set(forge.tokens)).toEqual(
        new Set([kind === 'github' ? 'Bearer secret-token' : 'secret-token']),
      );
      expect(git(['rev-parse', 'orq/s1/result'], remote)).toBe(git(['rev-parse', 'main'], repo));
    });
  }

  it('is opened by a session with integration.pullRequest, with its summary as the body', async () => {
    forge = await fakeForge('github');
    const { repo, remote } = repoWithRemote();
    process.env.ORQ_TEST_SESSION_TOKEN = 'session-token';
    const cluster = await startCluster({
      config: {
        execution: {
          defaultExecutor: 'command',
          workspaceRoot: join(tmp, 'ws'),
          command: {
            template: [process.execPath, FAKE_AGENT, '{{prompt}}'],
            repository: repo,
            baseBranch: 'main',
          },
        },
        integration: {
          pullRequest: {
            provider: 'github',
            project: 'o/r',
            apiUrl: forge.url,
            tokenEnv: 'ORQ_TEST_SESSION_TOKEN',
          },
        },
      },
    });
    const session = await cluster.client.submit({
      instruction: 'Write the parser and write the printer',
    });
    const view = await cluster.client.wait(session.id, { timeoutMs: 60_000 });
    expect(view.session.state).toBe('COMPLETED');

    const branch = `orq/${session.id}/result`;
    expect(forge.opened).toHaveLength(1);
    expect(forge.opened[0]?.head).toBe(branch);
    expect(forge.opened[0]?.title).toBe('Write the parser and write the printer');
    expect(forge.opened[0]?.body).toContain('- t3: Integrate and verify');
    expect(forge.opened[0]?.body).toMatch(/3 files changed/);
    expect(git(['rev-parse', branch], remote)).toBe(git(['rev-parse', branch], repo));
    const result = await cluster.client.result(session.id);
    expect(result.integration?.pullRequest).toEqual({
      provider: 'github',
      url: 'https://forge.test/o/r/pull/1',
      number: 1,
    });
    // Opened once the final judge found the branch done, then the session completed.
    const steps = (await cluster.client.history(session.id))
      .map((e) => e.entry)
      .flatMap((e) =>
        e.type === 'decision' && e.decision.startsWith('integration:')
          ? [e.decision]
          : e.type === 'state_change' && e.entity === 'session'
            ? [e.to]
            : [],
      );
    expect(steps.slice(-6)).toEqual([
      'INTEGRATING',
      'integration:merged',
      'integration:done',
      'integration:publish',
      'integration:published',
      'COMPLETED',
    ]);
  });

  it('opens none for a result branch the final judge finds wanting', async () => {
    forge = await fakeForge('github');
    const { repo, remote } = repoWithRemote();
    process.env.ORQ_TEST_WANTING_TOKEN = 'wanting-token';
    const { models } = recordingModels({
      tasks: {
        'final-judgement-1': {
          judgements: [
            {
              success: false,
              shouldContinue: false,
              shouldReplan: true,
              reason: 'the printer is missing',
              missingRequirements: ['Write the printer'],
            },
          ],
        },
      },
    });
    const cluster = await startCluster({
      models,
      config: {
        execution: {
          defaultExecutor: 'command',
          workspaceRoot: join(tmp, 'ws-wanting'),
          command: { template: [process.execPath, FAKE_AGENT, '{{prompt}}'], repository: repo },
        },
        integration: {
          maxRounds: 0,
          pullRequest: {
            provider: 'github',
            project: 'o/r',
            apiUrl: forge.url,
            tokenEnv: 'ORQ_TEST_WANTING_TOKEN',
          },
        },
      },
    });
    const session = await cluster.client.submit({ instruction: 'Write the parser' });
    const view = await cluster.client.wait(session.id, { timeoutMs: 60_000 });
    expect(view.session.state).toBe('FAILED');
    expect(view.session.failure?.code).toBe('INTEGRATION_INCOMPLETE');
    // Before, the request was opened with the merge, before the judge had looked.
    expect(forge.opened).toEqual([]);
    expect(forge.creates()).toBe(0);
    expect(git(['branch', '--list'], remote)).not.toContain(`orq/${session.id}/result`);
  });

  it('fails the session with INTEGRATION_FAILED when the request cannot be opened', async () => {
    const closed = await fakeForge('github');
    await closed.close();
    const { repo } = repoWithRemote();
    process.env.ORQ_TEST_CLOSED_TOKEN = 'closed-token';
    const cluster = await startCluster({
      config: {
        queues: { attempts: 1 },
        execution: {
          defaultExecutor: 'command',
          workspaceRoot: join(tmp, 'ws-closed'),
          command: { template: [process.execPath, FAKE_AGENT, '{{prompt}}'], repository: repo },
        },
        integration: {
          pullRequest: {
            provider: 'github',
            project: 'o/r',
            apiUrl: closed.url,
            tokenEnv: 'ORQ_TEST_CLOSED_TOKEN',
          },
        },
      },
    });
    const session = await cluster.client.submit({ instruction: 'Write the parser' });
    const view = await cluster.client.wait(session.id, { timeoutMs: 60_000 });
    expect(view.session.state).toBe('FAILED');
    expect(view.session.failure?.code).toBe('INTEGRATION_FAILED');
    expect(view.session.failure?.reason).toMatch(/^the integration failed: .*fetch failed/);
  });
});
