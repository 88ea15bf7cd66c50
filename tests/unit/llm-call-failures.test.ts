import { describe, expect, it } from 'vitest';
import {
  apiErrorMessage,
  callFailure,
  describeAnswers,
  isPermanentCallFailure,
  PLACEHOLDER_API_KEY,
  resolveApiKey,
  sdkCallFailure,
  untilAborted,
  usageOfFailure,
  withUsageSpent,
  type CallTarget,
  type SdkErrorClasses,
} from '../../src/workers/llm/chat.js';
import { OrqError } from '../../src/shared/errors.js';

const target: CallTarget = {
  role: 'worker',
  provider: 'openai',
  label: 'openai:test',
  baseUrl: 'http://127.0.0.1:9/v1',
  timeoutMs: 1000,
  maxRetries: 2,
};
const usage = { inputTokens: 11, outputTokens: 7 };

describe('resolveApiKey', () => {
  const env = { OPENAI_API_KEY: 'sk-real', WORKER_KEY: 'sk-worker' };

  it("never sends the provider's usual key to a server a baseUrl names", () => {
    const local = { provider: 'openai' as const, baseUrl: 'http://gpu-box:8000/v1' };
    expect(resolveApiKey('worker', local, env)).toBe(PLACEHOLDER_API_KEY);
    expect(resolveApiKey('worker', { ...local, apiKeyEnv: 'WORKER_KEY' }, env)).toBe('sk-worker');
    expect(() => resolveApiKey('worker', { ...local, apiKeyEnv: 'NOT_SET' }, env)).toThrow(
      /neither NOT_SET nor NOT_SET_FILE is set/,
    );
  });

  it("takes the provider's usual variable without a baseUrl", () => {
    expect(resolveApiKey('planner', { provider: 'openai' }, env)).toBe('sk-real');
    expect(() => resolveApiKey('judge', { provider: 'anthropic' }, env)).toThrow(
      /neither ANTHROPIC_API_KEY nor ANTHROPIC_API_KEY_FILE is set/,
    );
  });
});

describe('describeAnswers', () => {
  it('counts each status once, in the order first seen', () => {
    expect(describeAnswers([429, 429, 503, 429])).toBe('429 ×3, 503');
    expect(describeAnswers([500])).toBe('500');
    expect(describeAnswers([])).toBe('');
  });

  it('goes into the message of a timeout, when there were answers', () => {
    const timedOut = (answers: number[]) =>
      callFailure('timeout', target, { message: '', answers }).summary;
    expect(timedOut([429, 429])).toBe(
      'The worker call to openai:test timed out after 1s (the server had answered 429 ×2)',
    );
    expect(timedOut([])).toBe('The worker call to openai:test timed out after 1s');
  });
});

describe('apiErrorMessage', () => {
  const sdkError = (message: string, body: unknown) =>
    Object.assign(new Error(message), { error: body });

  it('reads the message and type of an OpenAI and of an Anthropic error body', () => {
    const openai = { message: 'Invalid schema', type: 'invalid_request_error' };
    expect(apiErrorMessage(sdkError('400 Invalid schema', openai))).toBe(
      'invalid_request_error: Invalid schema',
    );
    const anthropic = {
      type: 'error',
      error: { type: 'invalid_request_error', message: 'max_tokens: must be positive' },
    };
    expect(apiErrorMessage(sdkError(`400 ${JSON.stringify(anthropic)}`, anthropic))).toBe(
      'invalid_request_error: max_tokens: must be positive',
    );
    expect(apiErrorMessage(sdkError('400 x', { message: 'no type' }))).toBe('no type');
  });

  it("falls back to the SDK's message without its leading status", () => {
    expect(apiErrorMessage(sdkError('502 Bad Gateway', undefined))).toBe('Bad Gateway');
    expect(apiErrorMessage(sdkError('502 <html>', '<html>'))).toBe('<html>');
    expect(apiErrorMessage(sdkError('Connection reset', { message: '' }))).toBe('Connection reset');
  });
});

describe('the hint of a 404', () => {
  const hintFor = (provider: CallTarget['provider'], baseUrl?: string) =>
    (
      callFailure(
        'http',
        { ...target, provider, baseUrl },
        { message: 'no', status: 404 },
      ) as OrqError
    ).hint;

  it('tells an Anthropic baseUrl to leave out the /v1 its SDK adds', () => {
    for (const baseUrl of ['http://proxy:8080/v1', 'http://proxy:8080/v1/']) {
      expect(hintFor('anthropic', baseUrl)).toBe(
        'Check llm.worker.model and llm.worker.baseUrl: the Anthropic SDK adds /v1/messages to baseUrl itself, so leave /v1 out (http://proxy:8080)',
      );
    }
  });

  it('tells an OpenAI-compatible baseUrl without /v1 where such servers serve their API', () => {
    expect(hintFor('openai', 'http://localhost:11434')).toBe(
      'Check llm.worker.model and llm.worker.baseUrl: OpenAI-compatible servers usually serve their API under /v1 (http://localhost:11434/v1)',
    );
  });

  it('names only the model and baseUrl settings when the baseUrl has the usual form, or none is set', () => {
    const plain = 'Check llm.worker.model and llm.worker.baseUrl';
    expect(hintFor('openai', 'http://localhost:11434/v1')).toBe(plain);
    expect(hintFor('anthropic', 'http://proxy:8080')).toBe(plain);
    expect(hintFor('openai')).toBe(plain);
    expect(hintFor('anthropic')).toBe(plain);
  });
});

describe('isPermanentCallFailure (a job that would fail the same way again, on any pod)', () => {
  const http = (status: number) => callFailure('http', target, { message: 'no', status });
  it.each([
    ['HTTP 400', http(400), true],
    ['HTTP 404', http(404), true],
    ['HTTP 422', http(422), true],
    ['HTTP 401 (another pod may hold another key)', http(401), false],
    ['HTTP 403', http(403), false],
    ['HTTP 429', http(429), false],
    ['HTTP 503', http(503), false],
    ['a reply cut off', callFailure('reply', target, { message: 'cut', truncated: true }), true],
    ['an empty reply', callFailure('reply', target, { message: 'empty' }), false],
    ['a timeout', callFailure('timeout', target, { message: '' }), false],
    ['unreachable', callFailure('connection', target, { message: 'ECONNREFUSED' }), false],
    ['another OrqError', new OrqError('LLM_OUTPUT_INVALID', 'bad'), false],
    ['a plain Error', new Error('x'), false],
  ])('%s', (_, error, permanent) => {
    expect(isPermanentCallFailure(error)).toBe(permanent);
  });

  it('gives the output-limit hint only for a reply that was cut off', () => {
    expect(callFailure('reply', target, { message: 'cut', truncated: true }).hint).toBe(
      'Raise llm.worker.maxOutputTokens',
    );
    expect(callFailure('reply', target, { message: 'refused' }).hint).toBeUndefined();
  });

  it('says no key was sent when a baseUrl without apiKeyEnv answers 401', () => {
    expect(callFailure('http', target, { message: 'no', status: 401 }).hint).toContain(
      'llm.worker.apiKeyEnv',
    );
    const keyed = { ...target, apiKeyEnv: 'WORKER_KEY' };
    expect(callFailure('http', keyed, { message: 'no', status: 401 }).hint).toContain(
      'Check the API key in WORKER_KEY',
    );
  });
});

describe('usage of failed calls', () => {
  it('reads what a failure carries, and adds what earlier turns spent', () => {
    const cut = callFailure('reply', target, { message: 'cut', truncated: true, usage });
    expect(usageOfFailure(cut)).toEqual(usage);
    expect(usageOfFailure(withUsageSpent(cut, { inputTokens: 100, outputTokens: 50 }))).toEqual({
      inputTokens: 111,
      outputTokens: 57,
    });
    // A failure that carries none gets what was spent before it.
    const timeout = callFailure('timeout', target, { message: '' });
    expect(usageOfFailure(timeout)).toBeUndefined();
    expect(usageOfFailure(withUsageSpent(timeout, usage))).toEqual(usage);
    expect(usageOfFailure(new Error('x'))).toBeUndefined();
  });
});

describe('untilAborted', () => {
  it('settles with the promise while the signal holds', async () => {
    await expect(untilAborted(Promise.resolve(1), new AbortController().signal)).resolves.toBe(1);
    await expect(
      untilAborted(Promise.reject(new Error('boom')), new AbortController().signal),
    ).rejects.toThrow('boom');
  });

  it('rejects with the reason as soon as the signal aborts, the promise still pending', async () => {
    const controller = new AbortController();
    const never = new Promise<number>(() => undefined);
    const raced = untilAborted(never, controller.signal);
    controller.abort(new DOMException('deadline', 'TimeoutError'));
    await expect(raced).rejects.toMatchObject({ name: 'TimeoutError' });
    await expect(untilAborted(never, controller.signal)).rejects.toMatchObject({
      name: 'TimeoutError',
    });
  });
});

describe('sdkCallFailure', () => {
  class Base extends Error {}
  const sdk = {
    APIError: class extends Base {},
    APIConnectionError: class extends Base {},
    APIConnectionTimeoutError: class extends Base {},
    APIUserAbortError: class extends Base {},
  } as unknown as SdkErrorClasses;
  const call = { timedOut: () => false, cancelled: () => false };

  it('names a body that is not JSON as an unusable reply', () => {
    const error = sdkCallFailure(
      new SyntaxError('Unexpected end of JSON input'),
      call,
      target,
      sdk,
    );
    expect(error).toBeInstanceOf(OrqError);
    expect((error as OrqError).message).toContain(
      'gave no usable reply: the response body is not JSON (Unexpected end of JSON input)',
    );
    expect((error as OrqError).hint).toContain('http://127.0.0.1:9/v1');
  });
});
