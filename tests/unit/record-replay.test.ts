import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { QualityJudgement } from '../../src/shared/domain/plan.js';
import { OrqError } from '../../src/shared/errors.js';
import type { ChatProvider, ChatRequest } from '../../src/workers/llm/chat.js';
import {
  canonicalJson,
  requestHash,
  withRecordReplay,
} from '../../src/workers/llm/record-replay.js';

const dirs: string[] = [];
const tempDir = () => {
  const dir = mkdtempSync(join(tmpdir(), 'orq-rec-'));
  dirs.push(dir);
  return dir;
};
afterAll(() => {
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

const request: ChatRequest = {
  role: 'judge',
  system: 'judge the plan',
  user: 'plan: t1, t2',
  // The shape QualityJudgement had when the hash below was taken (a fixture, not the record).
  schema: QualityJudgement.omit({ adaptive: true, scoreWeighting: true }),
  schemaName: 'QualityJudgement',
  temperature: 0,
  timeoutMs: 5000,
};
const identity = { provider: 'openai', model: 'gpt-test' };

function countingProvider(): ChatProvider & { calls: number } {
  const provider = {
    label: 'counting',
    calls: 0,
    complete() {
      provider.calls += 1;
      return Promise.resolve({
        raw: `{"score": ${80 + provider.calls}, "isAcceptable": true}`,
        usage: { inputTokens: 5, outputTokens: 2 },
      });
    },
  };
  return provider;
}

describe('requestHash', () => {
  it('is the same for equal requests whatever the key order, timeout or signal', () => {
    expect(canonicalJson({ b: 1, a: [{ d: 2, c: 3 }] })).toBe('{"a":[{"c":3,"d":2}],"b":1}');
    const again: ChatRequest = {
      ...request,
      timeoutMs: 1,
      signal: new AbortController().signal,
    };
    expect(requestHash(identity, again)).toBe(requestHash(identity, request));
  });

  it('differs for another prompt, model, repair turn or judge sample', () => {
    const hash = requestHash(identity, request);
    expect(requestHash(identity, { ...request, user: 'plan: t1' })).not.toBe(hash);
    expect(requestHash({ ...identity, model: 'other' }, request)).not.toBe(hash);
    expect(
      requestHash(identity, { ...request, followUp: { reply: 'x', correction: 'y' } }),
    ).not.toBe(hash);
    expect(requestHash(identity, { ...request, sample: 1 })).not.toBe(hash);
  });

  it('covers the tools of a function-calling request, and leaves other requests as they were', () => {
    const tool = { name: 'read_file', description: 'read', inputSchema: { type: 'object' } };
    const hash = requestHash(identity, request);
    // The hash of this request before tools existed: recordings made then still replay.
    expect(hash).toBe('a3eb5a231e778a370e03f8736166d8fcfea0c9e5365f6241fe729695dca5e1e7');
    const withTools = requestHash(identity, { ...request, tools: [tool] });
    expect(withTools).not.toBe(hash);
    expect(
      requestHash(identity, { ...request, tools: [{ ...tool, name: 'write_file' }] }),
    ).not.toBe(withTools);
  });
});

describe('withRecordReplay', () => {
  it('records each call to a file named by its hash, and replays it without the provider', async () => {
    const path = tempDir();
    const inner = countingProvider();
    const recorder = withRecordReplay({ mode: 'record', path, ...identity, inner: () => inner });
    const recorded = await recorder.complete(request);
    const hash = requestHash(identity, request);
    expect(readdirSync(path)).toEqual([`${hash}.json`]);
    const file = JSON.parse(readFileSync(join(path, `${hash}.json`), 'utf8')) as {
      role: string;
      request: { user: string };
    };
    expect(file).toMatchObject({ role: 'judge', request: { user: 'plan: t1, t2' } });

    const replayer = withRecordReplay({
      mode: 'replay',
      path,
      ...identity,
      inner: () => {
        throw new Error('replay must not create the provider');
      },
    });
    expect(await replayer.complete(request)).toEqual(recorded);
    expect(await replayer.complete(request)).toEqual(recorded);
    expect(inner.calls).toBe(1);
  });

  it('names the hash and the role of a request that was not recorded', async () => {
    const replayer = withRecordReplay({
      mode: 'replay',
      path: tempDir(),
      ...identity,
      inner: () => countingProvider(),
    });
    const error = await replayer.complete(request).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OrqError);
    const hash = requestHash(identity, request);
    expect((error as OrqError).message).toContain(hash);
    expect((error as OrqError).message).toContain('judge');
    expect((error as OrqError).details).toMatchObject({ hash, role: 'judge' });
  });
});
