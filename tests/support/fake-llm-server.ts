import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * A real HTTP server on 127.0.0.1 that speaks either the OpenAI chat-completions protocol
 * (POST /v1/chat/completions) or the Anthropic messages protocol (POST /v1/messages), answering
 * each request with what a test's script says. The script sees the request parsed: which schema
 * it asks for (so which role is calling), its messages, and the full text for markers.
 */

export type Protocol = 'openai' | 'anthropic';

export interface FakeLlmRequest {
  protocol: Protocol;
  /** response_format.json_schema.name (OpenAI) or the forced tool's name (Anthropic). */
  schemaName: string;
  /** Tools offered for native function calling (any of them may be called); [] otherwise. */
  tools: string[];
  system: string;
  messages: { role: string; content: string }[];
  /** Every message after the first user message (a repair turn has two). */
  followUp: boolean;
  /**
   * The request asks the server to enforce the reply's schema: OpenAI response_format
   * json_schema, Anthropic output_config.format (answered as JSON text), or an Anthropic
   * tool_choice forcing one tool (answered with that tool call).
   */
  formatRequested: boolean;
  /** An Anthropic tool_choice forcing one tool (which current Claude models refuse). */
  toolForced: boolean;
  /** A JSON Schema is shown in the conversation's text (the prompt or a repair turn). */
  schemaInText: boolean;
  /** system + all messages, to look for markers. */
  text: string;
  body: Record<string, unknown>;
  headers: IncomingMessage['headers'];
}

export type FakeReply =
  /**
   * A JSON answer: tool input (Anthropic) or message content; `wrap` puts it in text;
   * `noUsage` leaves the usage out, as some local servers and proxies do; `usage` bills this
   * instead of FAKE_USAGE; `promptTokens` is the prompt's count to report instead of
   * FAKE_USAGE's (OpenAI). `scoreLogprobs` (OpenAI) are the alternatives of the `score`
   * number's token (token text → log-probability), returned as `logprobs.content` when the
   * request asks for `logprobs`, like vLLM and OpenAI do; without it no log-probabilities.
   */
  | {
      json: unknown;
      wrap?: 'fence' | 'prose';
      noUsage?: boolean;
      usage?: { input: number; output: number };
      promptTokens?: number;
      scoreLogprobs?: Record<string, number>;
    }
  /** A text answer as it is. */
  | { text: string }
  /** A native function call: OpenAI tool_calls, Anthropic tool_use (arguments as given). */
  | { toolCall: { name: string; input: unknown } }
  /**
   * An HTTP error status (429, 500…), with Retry-After in ms for fast retries; `type` names the
   * error (OpenAI's error.type and error.code, Anthropic's error.type), `scripted` by default;
   * `message` is what the server says, `scripted <status>` by default.
   */
  | { status: number; retryAfterMs?: number; type?: string; message?: string }
  /** Never answers: the test expects the client to abort. */
  | { hang: true }
  /** A reply cut off at the output token limit (billed FAKE_USAGE like any answer). */
  | { truncated: string }
  /** A 200 with this body as it is (not JSON, or JSON that is not a completion). */
  | { rawBody: string; contentType?: string };

export type FakeScript = (request: FakeLlmRequest) => FakeReply | Promise<FakeReply>;

/**
 * A requests quota the server enforces like OpenAI documents its own: a bucket of `requests`
 * that refills continuously over `perMs`. A request beyond it is answered 429 with Retry-After
 * (whole seconds, rounded up) and the protocol's rate-limit headers (OpenAI
 * x-ratelimit-remaining/reset-requests, Anthropic anthropic-ratelimit-requests-remaining/reset).
 */
export interface FakeQuota {
  requests: number;
  perMs: number;
  /** Send Retry-After (default true); without it only the protocol's own headers say when. */
  retryAfter?: boolean;
}

/** What the quota let through and refused. */
export interface FakeQuotaLog {
  /** When each request within the quota arrived (ms). */
  accepted: number[];
  /** When each request answered 429 arrived (ms). */
  refused: number[];
}

/** A continuously refilled bucket: whether a request may pass now, else how long until one may. */
function quotaBucket(quota: FakeQuota): (now: number) => number {
  let level = quota.requests;
  let last: number | undefined;
  const rate = quota.requests / quota.perMs;
  return (now) => {
    level = Math.min(quota.requests, level + (now - (last ?? now)) * rate);
    last = now;
    if (level >= 1) {
      level -= 1;
      return 0;
    }
    return Math.ceil((1 - level) / rate);
  };
}

/** The 429's headers in the protocol's own words, for a wait of `waitMs`. */
function quotaHeaders(protocol: Protocol, quota: FakeQuota, waitMs: number, now: number) {
  const headers: Record<string, string> =
    protocol === 'openai'
      ? {
          'x-ratelimit-limit-requests': String(quota.requests),
          'x-ratelimit-remaining-requests': '0',
          'x-ratelimit-reset-requests': `${waitMs}ms`,
        }
      : {
          'anthropic-ratelimit-requests-limit': String(quota.requests),
          'anthropic-ratelimit-requests-remaining': '0',
          'anthropic-ratelimit-requests-reset': new Date(now + waitMs).toISOString(),
        };
  if (quota.retryAfter !== false) headers['retry-after'] = String(Math.ceil(waitMs / 1000));
  return headers;
}

/** Fixed usage per answer, so tests can add up what the server billed. */
export const FAKE_USAGE = { input: 11, output: 7 };

export interface FakeLlmServer {
  protocol: Protocol;
  /** The baseUrl to configure: `…/v1` for OpenAI, the origin for Anthropic. */
  baseUrl: string;
  requests: FakeLlmRequest[];
  /** Statuses sent, in order (200 for answers). */
  statuses: number[];
  /** Hanging requests whose client went away. */
  aborted: number;
  /** With a quota: what it let through and refused. */
  quotaLog: FakeQuotaLog;
  script: FakeScript;
  close(): Promise<void>;
}

function contentText(content: unknown): string {
  if (typeof content === 'string') return content;
  if (Array.isArray(content)) {
    return content
      .map((block: { type?: string; text?: string; input?: unknown }) =>
        block.type === 'text' ? (block.text ?? '') : JSON.stringify(block.input ?? block),
      )
      .join('\n');
  }
  return '';
}

function parse(protocol: Protocol, body: Record<string, unknown>, req: IncomingMessage) {
  const rawMessages = (body.messages ?? []) as { role: string; content: unknown }[];
  let system = '';
  let messages = rawMessages.map((m) => ({ role: m.role, content: contentText(m.content) }));
  let schemaName = '';
  let formatRequested = false;
  let toolForced = false;
  if (protocol === 'openai') {
    system = messages.find((m) => m.role === 'system')?.content ?? '';
    messages = messages.filter((m) => m.role !== 'system');
    const format = body.response_format as { json_schema?: { name?: string } } | undefined;
    schemaName = format?.json_schema?.name ?? '';
    formatRequested = Boolean(schemaName);
  } else {
    system = contentText(body.system);
    const choice = body.tool_choice as { name?: string } | undefined;
    const output = body.output_config as { format?: { schema?: { title?: string } } } | undefined;
    toolForced = Boolean(choice?.name);
    schemaName = choice?.name ?? output?.format?.schema?.title ?? '';
    formatRequested = toolForced || output?.format !== undefined;
  }
  if (!schemaName) schemaName = /schema `(\w+)`/.exec(system)?.[1] ?? '';
  const offered = (body.tools ?? []) as { name?: string; function?: { name?: string } }[];
  const forced = protocol === 'anthropic' && toolForced;
  const text = [system, ...messages.map((m) => m.content)].join('\n');
  const request: FakeLlmRequest = {
    protocol,
    schemaName,
    tools: forced ? [] : offered.map((t) => t.function?.name ?? t.name ?? ''),
    system,
    messages,
    followUp: messages.length > 1,
    formatRequested,
    toolForced,
    schemaInText: /"properties":\s*\{/.test(text),
    text,
    body,
    headers: req.headers,
  };
  return request;
}

function wrapJson(json: unknown, wrap: 'fence' | 'prose' | undefined): string {
  const text = JSON.stringify(json, null, 2);
  if (wrap === 'fence') return `\`\`\`json\n${text}\n\`\`\``;
  if (wrap === 'prose') return `Sure! Here is my answer:\n${text}\nLet me know if you need more.`;
  return text;
}

/**
 * `logprobs.content` for a reply text: the `"score": N` number is one token whose
 * top_logprobs are `alternatives` (at most top_logprobs of them, likeliest first), and the rest
 * of the text is one token before and one after it, each certain.
 */
function scoreTokenLogprobs(text: string, alternatives: Record<string, number>, top: number) {
  const match = /("score"\s*:\s*)(\d+)/.exec(text);
  if (!match) return null;
  const start = match.index + (match[1] as string).length;
  const number = match[2] as string;
  const certain = (token: string) => ({
    token,
    logprob: 0,
    bytes: null,
    top_logprobs: [{ token, logprob: 0, bytes: null }],
  });
  const ranked = Object.entries(alternatives)
    .sort((a, b) => b[1] - a[1])
    .slice(0, top)
    .map(([token, logprob]) => ({ token, logprob, bytes: null }));
  return {
    content: [
      certain(text.slice(0, start)),
      { token: number, logprob: alternatives[number] ?? 0, bytes: null, top_logprobs: ranked },
      certain(text.slice(start + number.length)),
    ],
    refusal: null,
  };
}

/** An OpenAI chat completion with one choice, billed FAKE_USAGE. */
function openAiCompletion(request: FakeLlmRequest, message: unknown, finishReason: string) {
  return {
    id: 'chatcmpl-fake',
    object: 'chat.completion',
    created: 0,
    model: String(request.body.model),
    choices: [{ index: 0, message, finish_reason: finishReason, logprobs: null }],
    usage: {
      prompt_tokens: FAKE_USAGE.input,
      completion_tokens: FAKE_USAGE.output,
      total_tokens: FAKE_USAGE.input + FAKE_USAGE.output,
    },
  };
}

/** An Anthropic message of these content blocks, billed FAKE_USAGE. */
function anthropicMessage(
  request: FakeLlmRequest,
  content: ({ type: string } & Record<string, unknown>)[],
) {
  return {
    id: 'msg_fake',
    type: 'message',
    role: 'assistant',
    model: String(request.body.model),
    content,
    stop_reason: content[0]?.type === 'tool_use' ? 'tool_use' : 'end_turn',
    stop_sequence: null,
    usage: { input_tokens: FAKE_USAGE.input, output_tokens: FAKE_USAGE.output },
  };
}

function answer(
  protocol: Protocol,
  request: FakeLlmRequest,
  reply: Exclude<
    FakeReply,
    { status: number } | { hang: true } | { rawBody: string; contentType?: string }
  >,
): unknown {
  if ('truncated' in reply) {
    if (protocol === 'openai') {
      return openAiCompletion(request, { role: 'assistant', content: reply.truncated }, 'length');
    }
    return {
      ...anthropicMessage(request, [{ type: 'text', text: reply.truncated }]),
      stop_reason: 'max_tokens',
    };
  }
  if ('toolCall' in reply) {
    const { name, input } = reply.toolCall;
    if (protocol === 'anthropic') {
      return anthropicMessage(request, [{ type: 'tool_use', id: 'toolu_fake', name, input }]);
    }
    const args = typeof input === 'string' ? input : JSON.stringify(input);
    const call = { id: 'call_fake', type: 'function', function: { name, arguments: args } };
    return openAiCompletion(
      request,
      { role: 'assistant', content: null, tool_calls: [call] },
      'tool_calls',
    );
  }
  const text =
    'json' in reply ? wrapJson(reply.json, reply.wrap) : (reply as { text: string }).text;
  if (protocol === 'openai') {
    const completion = openAiCompletion(request, { role: 'assistant', content: text }, 'stop');
    if ('json' in reply && reply.scoreLogprobs && request.body.logprobs === true) {
      const top = Number(request.body.top_logprobs ?? 0);
      const [choice] = completion.choices;
      Object.assign(choice as object, {
        logprobs: scoreTokenLogprobs(text, reply.scoreLogprobs, top),
      });
    }
    if ('json' in reply && reply.noUsage) {
      const { usage: _usage, ...withoutUsage } = completion;
      return withoutUsage;
    }
    if ('json' in reply && reply.promptTokens !== undefined) {
      const { promptTokens } = reply;
      const total = promptTokens + FAKE_USAGE.output;
      return {
        ...completion,
        usage: { ...completion.usage, prompt_tokens: promptTokens, total_tokens: total },
      };
    }
    return completion;
  }
  const message = anthropicMessage(
    request,
    'json' in reply && !reply.wrap && request.toolForced
      ? [{ type: 'tool_use', id: 'toolu_fake', name: request.schemaName, input: reply.json }]
      : [{ type: 'text', text }],
  );
  if ('json' in reply && reply.noUsage) {
    const { usage: _usage, ...withoutUsage } = message;
    return withoutUsage;
  }
  return message;
}

/** The answer billed the usage its reply names, in the protocol's own fields. */
function billed(protocol: Protocol, body: unknown, reply: FakeReply): unknown {
  if (!('json' in reply) || !reply.usage || reply.noUsage) return body;
  const { input, output } = reply.usage;
  const usage =
    protocol === 'openai'
      ? { prompt_tokens: input, completion_tokens: output, total_tokens: input + output }
      : { input_tokens: input, output_tokens: output };
  return { ...(body as Record<string, unknown>), usage };
}

export async function startFakeLlmServer(
  protocol: Protocol,
  script: FakeScript,
  options: { quota?: FakeQuota } = {},
): Promise<FakeLlmServer> {
  const path = protocol === 'openai' ? '/v1/chat/completions' : '/v1/messages';
  const { quota } = options;
  const takeQuota = quota ? quotaBucket(quota) : undefined;
  const state: FakeLlmServer = {
    protocol,
    baseUrl: '',
    requests: [],
    statuses: [],
    aborted: 0,
    quotaLog: { accepted: [], refused: [] },
    script,
    close: async () => undefined,
  };

  const send = (res: ServerResponse, status: number, body: unknown, headers = {}) => {
    state.statuses.push(status);
    res.writeHead(status, { 'content-type': 'application/json', ...headers });
    res.end(JSON.stringify(body));
  };

  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      void (async () => {
        if (req.method !== 'POST' || req.url !== path) {
          send(res, 404, { error: { message: `no route ${req.method} ${req.url}` } });
          return;
        }
        const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as Record<string, unknown>;
        const request = parse(protocol, body, req);
        state.requests.push(request);
        if (quota && takeQuota) {
          const now = Date.now();
          const waitMs = takeQuota(now);
          if (waitMs > 0) {
            state.quotaLog.refused.push(now);
            const message = `rate limit reached: ${quota.requests} requests per ${quota.perMs} ms`;
            const error =
              protocol === 'openai'
                ? { error: { message, type: 'requests', code: 'rate_limit_exceeded' } }
                : { type: 'error', error: { type: 'rate_limit_error', message } };
            send(res, 429, error, quotaHeaders(protocol, quota, waitMs, now));
            return;
          }
          state.quotaLog.accepted.push(now);
        }
        let reply: FakeReply;
        try {
          reply = await state.script(request);
        } catch (error) {
          send(res, 500, { error: { message: `script failed: ${String(error)}` } });
          return;
        }
        if ('hang' in reply) {
          res.on('close', () => {
            if (!res.writableEnded) state.aborted += 1;
          });
          return;
        }
        if ('status' in reply) {
          // No x-should-retry header: the SDKs must decide from the status alone.
          const headers =
            reply.retryAfterMs !== undefined
              ? { 'retry-after-ms': String(reply.retryAfterMs) }
              : {};
          const type = reply.type ?? 'scripted';
          const message = reply.message ?? `scripted ${reply.status}`;
          const error =
            protocol === 'openai'
              ? { error: { message, type, ...(reply.type ? { code: reply.type } : {}) } }
              : { type: 'error', error: { type, message } };
          send(res, reply.status, error, headers);
          return;
        }
        if ('rawBody' in reply) {
          state.statuses.push(200);
          res.writeHead(200, { 'content-type': reply.contentType ?? 'application/json' });
          res.end(reply.rawBody);
          return;
        }
        send(res, 200, billed(protocol, answer(protocol, request, reply), reply));
      })();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  state.baseUrl =
    protocol === 'openai' ? `http://127.0.0.1:${port}/v1` : `http://127.0.0.1:${port}`;
  state.close = () =>
    new Promise<void>((resolve) => {
      server.closeAllConnections();
      server.close(() => resolve());
    });
  return state;
}
