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
  /** system + all messages, to look for markers. */
  text: string;
  body: Record<string, unknown>;
  headers: IncomingMessage['headers'];
}

export type FakeReply =
  /**
   * A JSON answer: tool input (Anthropic) or message content; `wrap` puts it in text;
   * `noUsage` leaves the usage out (OpenAI), as some local servers do.
   */
  | { json: unknown; wrap?: 'fence' | 'prose'; noUsage?: boolean }
  /** A text answer as it is. */
  | { text: string }
  /** A native function call: OpenAI tool_calls, Anthropic tool_use (arguments as given). */
  | { toolCall: { name: string; input: unknown } }
  /** An HTTP error status (429, 500…), with Retry-After in ms for fast retries. */
  | { status: number; retryAfterMs?: number }
  /** Never answers: the test expects the client to abort. */
  | { hang: true }
  /** A reply cut off at the output token limit (billed FAKE_USAGE like any answer). */
  | { truncated: string }
  /** A 200 with this body as it is (not JSON, or JSON that is not a completion). */
  | { rawBody: string; contentType?: string };

export type FakeScript = (request: FakeLlmRequest) => FakeReply | Promise<FakeReply>;

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
  if (protocol === 'openai') {
    system = messages.find((m) => m.role === 'system')?.content ?? '';
    messages = messages.filter((m) => m.role !== 'system');
    const format = body.response_format as { json_schema?: { name?: string } } | undefined;
    schemaName = format?.json_schema?.name ?? '';
  } else {
    system = contentText(body.system);
    const choice = body.tool_choice as { name?: string } | undefined;
    schemaName = choice?.name ?? '';
  }
  if (!schemaName) schemaName = /schema `(\w+)`/.exec(system)?.[1] ?? '';
  const offered = (body.tools ?? []) as { name?: string; function?: { name?: string } }[];
  const forced = protocol === 'anthropic' && Boolean(schemaName);
  const request: FakeLlmRequest = {
    protocol,
    schemaName,
    tools: forced ? [] : offered.map((t) => t.function?.name ?? t.name ?? ''),
    system,
    messages,
    followUp: messages.length > 1,
    text: [system, ...messages.map((m) => m.content)].join('\n'),
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
    if ('json' in reply && reply.noUsage) {
      const { usage: _usage, ...withoutUsage } = completion;
      return withoutUsage;
    }
    return completion;
  }
  return anthropicMessage(
    request,
    'json' in reply && !reply.wrap && request.schemaName
      ? [{ type: 'tool_use', id: 'toolu_fake', name: request.schemaName, input: reply.json }]
      : [{ type: 'text', text }],
  );
}

export async function startFakeLlmServer(
  protocol: Protocol,
  script: FakeScript,
): Promise<FakeLlmServer> {
  const path = protocol === 'openai' ? '/v1/chat/completions' : '/v1/messages';
  const state: FakeLlmServer = {
    protocol,
    baseUrl: '',
    requests: [],
    statuses: [],
    aborted: 0,
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
          const error =
            protocol === 'openai'
              ? { error: { message: `scripted ${reply.status}`, type: 'scripted' } }
              : { type: 'error', error: { type: 'scripted', message: `scripted ${reply.status}` } };
          send(res, reply.status, error, headers);
          return;
        }
        if ('rawBody' in reply) {
          state.statuses.push(200);
          res.writeHead(200, { 'content-type': reply.contentType ?? 'application/json' });
          res.end(reply.rawBody);
          return;
        }
        send(res, 200, answer(protocol, request, reply));
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
