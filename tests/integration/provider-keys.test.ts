import { mkdirSync, mkdtempSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { answerOneTask } from '../support/fake-answers.js';
import { clusterPerTest } from '../support/cluster.js';
import { startFakeLlmServer, type FakeLlmServer } from '../support/fake-llm-server.js';
import { git } from '../support/git.js';

/** Issue 41: a pod's provider keys reach its model calls, and no program it starts. */

/** orq's own credentials, which no agent CLI sees either. */
const POD_SECRETS = {
  REDIS_URL: 'redis://:hunter2@127.0.0.1:1',
  ORQ_API_TOKEN: 'api-token-t41',
  ORQ_OPERATOR_TOKEN: 'operator-token-t41',
  OTEL_EXPORTER_OTLP_HEADERS: 'Authorization=Basic dDQx',
};

/** What the agent CLI saw of the variables, on its output. */
const PRINT_ENV = [
  `for (const name of ["ORQ_T41_KEY", "ORQ_T41_AGENT_KEY", ${Object.keys(POD_SECRETS)
    .map((name) => `"${name}"`)
    .join(', ')}, "PATH"])`,
  '  console.log(`${name}=${process.env[name] ?? "absent"}`);',
].join('\n');

const startCluster = clusterPerTest();
let llm: FakeLlmServer;
let tmp: string;
beforeAll(async () => {
  llm = await startFakeLlmServer('openai', answerOneTask);
  tmp = realpathSync(mkdtempSync(join(tmpdir(), 'orq-keys-')));
});
afterAll(async () => {
  await llm.close();
  rmSync(tmp, { recursive: true, force: true });
});

const authorizations = () => new Set(llm.requests.map((r) => r.headers.authorization));

describe('provider keys', () => {
  it("leave the environment when a pod starts: the agent CLI does not inherit them nor orq's own credentials, the model calls still carry them", async () => {
    const repo = join(tmp, 'repo');
    mkdirSync(repo);
    git(['init', '-q'], repo);
    writeFileSync(join(repo, 'README.md'), '# project\n');
    git(['add', '-A'], repo);
    git(['commit', '-q', '-m', 'initial'], repo);
    process.env.ORQ_T41_KEY = 'sk-t41-from-env';
    process.env.ORQ_T41_AGENT_KEY = 'sk-t41-for-the-agent';
    const before = Object.fromEntries(Object.keys(POD_SECRETS).map((n) => [n, process.env[n]]));
    Object.assign(process.env, POD_SECRETS);
    llm.requests.length = 0;

    const cluster = await startCluster({
      config: {
        llm: {
          default: {
            provider: 'openai',
            model: 'fake-model',
            baseUrl: llm.baseUrl,
            apiKeyEnv: 'ORQ_T41_KEY',
          },
        },
        execution: {
          defaultExecutor: 'command',
          workspaceRoot: join(tmp, 'ws'),
          command: {
            template: [process.execPath, '-e', PRINT_ENV],
            repository: repo,
            providerKeys: ['ORQ_T41_AGENT_KEY'],
          },
        },
      },
    });
    // Taken at the pod's start, before any job: later code does not find it either.
    expect(process.env.ORQ_T41_KEY).toBeUndefined();

    const session = await cluster.client.submit({ instruction: 'write the parser' });
    const view = await cluster.client.wait(session.id, { timeoutMs: 30_000 }).finally(() => {
      for (const [name, value] of Object.entries(before)) {
        if (value === undefined) delete process.env[name];
        else process.env[name] = value;
      }
    });
    expect(view.session.state).toBe('COMPLETED');
    const output = view.tasks.find((t) => t.id === 't1')?.result?.output ?? '';
    expect(output).toContain('ORQ_T41_KEY=absent');
    for (const name of Object.keys(POD_SECRETS)) expect(output).toContain(`${name}=absent`);
    // The rest of the environment, which tools need, is there.
    expect(output).toContain(`PATH=${process.env.PATH}`);
    // A key the operator gives the agent (execution.command.providerKeys) reaches it.
    expect(output).toContain('ORQ_T41_AGENT_KEY=sk-t41-for-the-agent');
    expect(llm.requests.length).toBeGreaterThanOrEqual(3);
    expect(authorizations()).toEqual(new Set(['Bearer sk-t41-from-env']));
  });

  it('come from the file the _FILE variable names, never entering the environment', async () => {
    const file = join(tmp, 'openai-key');
    writeFileSync(file, 'sk-t41-from-file\n', { mode: 0o600 });
    process.env.ORQ_T41_FILE_KEY_FILE = file;
    llm.requests.length = 0;

    const cluster = await startCluster({
      config: {
        llm: {
          default: {
            provider: 'openai',
            model: 'fake-model',
            baseUrl: llm.baseUrl,
            apiKeyEnv: 'ORQ_T41_FILE_KEY',
          },
        },
      },
    });
    const session = await cluster.client.submit({ instruction: 'write the parser' });
    const view = await cluster.client.wait(session.id, { timeoutMs: 30_000 });
    expect(view.session.state).toBe('COMPLETED');
    expect(llm.requests.length).toBeGreaterThanOrEqual(4);
    expect(authorizations()).toEqual(new Set(['Bearer sk-t41-from-file']));
    expect(process.env.ORQ_T41_FILE_KEY).toBeUndefined();
  });
});
