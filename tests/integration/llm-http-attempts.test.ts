import { createServer, type AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/shared/config/load.js';
import { QualityJudgement } from '../../src/shared/domain/plan.js';
import { createAnthropicProvider } from '../../src/workers/llm/anthropic-provider.js';
import type { ChatProvider, ChatRequest } from '../../src/workers/llm/chat.js';
import { countHttpAttempts } from '../../src/workers/llm/http-attempt-counts.js';
import {
  onHttpAttempts,
  type HttpAttempt,
  type HttpAttemptTarget,
} from '../../src/workers/llm/http-attempts.js';
import { createChatProvider } from '../../src/workers/llm/llm-models.js';
import { createOpenAiProvider } from '../../src/workers/llm/openai-provider.js';
import { ModelResolver } from '../../src/workers/models.js';
import { makeSession } from '../support/executors.js';
import { startFakeLlmServer, type FakeLlmServer } from '../support/fake-llm-server.js';

/**
 * Every HTTP request the official SDKs send for a call is seen, with its status, including
 * the ones that got no answer: the counts behind the pod's orq_llm_http_* metrics.
 */

const judgement = { score: 90, isAcceptable: true, issues: [], suggestions: [] };

describe.each(['openai', 'anthropic'] as const)('HTTP attempts of the %s provider', (p) => {
  let server: FakeLlmServer;
  beforeAll(async () => {
    server = await startFakeLlmServer(p, (request) =>
      request.text.includes('[hang]') ? { hang: true } : { json: judgement },
    );
  });
  afterAll(() => server.close());

  const provider = (baseUrl: string, maxRetries: number): ChatProvider => {
    const config = parseConfig({
      llm: { default: { provider: p, model: 'm', baseUrl, maxRetries } },
    }).llm.default;
    return p === 'openai'
      ? createOpenAiProvider('judge', config)
      : createAnthropicProvider('judge', config);
  };
  const request = (text: string, timeoutMs = 10_000): ChatRequest => ({
    role: 'judge',
    system: 'judge',
    user: text,
    schema: QualityJudgement,
    schemaName: 'QualityJudgement',
    temperature: 0,
    timeoutMs,
  });
  const counted = (inner: ChatProvider) => {
    const seen: [HttpAttemptTarget, HttpAttempt][] = [];
    const target = { provider: p, model: 'm', role: 'judge' as const };
    const wrapped = countHttpAttempts(inner, target, {
      httpAttempt: (t, attempt) => seen.push([t, attempt]),
    });
    return { wrapped, seen };
  };

  it('an unreachable server: each attempt counted as connection, all but the first a retry', async () => {
    const probe = createServer();
    await new Promise<void>((r) => probe.listen(0, '127.0.0.1', r));
    const { port } = probe.address() as AddressInfo;
    await new Promise((r) => probe.close(r));
    const { wrapped, seen } = counted(provider(server.baseUrl.replace(/:\d+/, `:${port}`), 1));
    await expect(wrapped.complete(request('closed'))).rejects.toThrow(/unreachable/);
    expect(seen.map(([, a]) => [a.status, a.retry])).toEqual([
      ['connection', false],
      ['connection', true],
    ]);
    expect(seen[0]?.[0]).toEqual({ provider: p, model: 'm', role: 'judge' });
  });

  it('a request that never answers is counted as aborted when the call times out', async () => {
    const { wrapped, seen } = counted(provider(server.baseUrl, 0));
    await expect(wrapped.complete(request('[hang]', 300))).rejects.toThrow(/timed out/);
    expect(seen.map(([, a]) => a.status)).toEqual(['aborted']);
  });

  it('scopes nest: an outer scope hears the attempts of every call under it', async () => {
    const { wrapped, seen } = counted(provider(server.baseUrl, 0));
    const outer: HttpAttempt[] = [];
    await onHttpAttempts(
      (attempt) => outer.push(attempt),
      async () => {
        await wrapped.complete(request('one'));
        await wrapped.complete(request('two'));
      },
    );
    expect(seen.map(([, a]) => [a.status, a.retry])).toEqual([
      [200, false],
      [200, false],
    ]);
    expect(outer.map((a) => a.status)).toEqual([200, 200]);
    expect(outer.every((a) => a.seconds >= 0)).toBe(true);
  });

  it("the agent executor's own model (limitChat) is counted as the worker's", async () => {
    const seen: [HttpAttemptTarget, HttpAttempt][] = [];
    const models = new ModelResolver({
      httpAttempts: { httpAttempt: (target, attempt) => seen.push([target, attempt]) },
    });
    const config = parseConfig({
      llm: { default: { provider: p, model: 'agent-m', baseUrl: server.baseUrl } },
    }).llm.default;
    const controls = models.forExecution(makeSession(), 't1');
    try {
      await controls.limitChat(createChatProvider('worker', config), config).complete(request('x'));
    } finally {
      controls.release();
    }
    expect(seen).toEqual([
      [{ provider: p, model: 'agent-m', role: 'worker' }, expect.objectContaining({ status: 200 })],
    ]);
  });
});
