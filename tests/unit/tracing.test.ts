import { context, propagation, trace } from '@opentelemetry/api';
import {
  InMemorySpanExporter,
  NodeTracerProvider,
  SimpleSpanProcessor,
} from '@opentelemetry/sdk-trace-node';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { callFailure, type ChatProvider, type ChatRequest } from '../../src/workers/llm/chat.js';
import { parseConfig } from '../../src/shared/config/load.js';
import { QualityJudgement } from '../../src/shared/domain/plan.js';
import { createChatProvider } from '../../src/workers/llm/llm-models.js';
import { outboxJob } from '../../src/shared/queues.js';
import { inAgentSpan, tracedChat, type ModelCallOutcome } from '../../src/workers/llm/genai.js';
import { OrqError } from '../../src/shared/errors.js';
import {
  startTracing,
  stopTracing,
  tracesProtocol,
  tracingWanted,
} from '../../src/shared/tracing/sdk.js';
import { inSpan, parseTraceparent, withTraceparent } from '../../src/shared/tracing/trace.js';
import { Toolbox } from '../../src/workers/executors/agent/tools/toolbox.js';
import { FAKE_USAGE, startFakeLlmServer } from '../support/fake-llm-server.js';

// A provider registered for each test and removed after it: the files of a vitest worker share
// one module graph, and the others run with tracing off.
let exporter: InMemorySpanExporter;
let provider: NodeTracerProvider;
beforeEach(() => {
  exporter = new InMemorySpanExporter();
  provider = new NodeTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
  provider.register();
});
afterEach(async () => {
  trace.disable();
  context.disable();
  propagation.disable();
  await provider.shutdown();
  delete process.env.OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT;
});

const request: ChatRequest = {
  role: 'planner',
  system: 'You plan.',
  user: 'plan the parser',
  schema: z.object({}),
  schemaName: 'PlanBreakdown',
  timeoutMs: 1_000,
};

const answering: ChatProvider = {
  label: 'openai:m-test',
  complete: async () => ({
    raw: '{"tasks":[]}',
    usage: { inputTokens: 11, outputTokens: 7 },
    responseModel: 'm-test-2026',
    finishReasons: ['stop'],
  }),
};

const target = {
  provider: 'openai',
  model: 'm-test',
  role: 'planner' as const,
  baseUrl: 'http://127.0.0.1:8080/v1',
};

describe('trace context in job data', () => {
  it('adds no traceparent outside a span', () => {
    expect(withTraceparent({ sessionId: 's' })).toEqual({ sessionId: 's' });
  });

  it("an outbox job made in a span carries the span's traceparent, and a job span continues it", async () => {
    let carried: unknown;
    let parentId = '';
    await inSpan('cause', {}, async (span) => {
      parentId = span.spanContext().spanId;
      carried = (
        outboxJob('plan', 'plan', 'plan|s|0', { sessionId: 's', attempt: 0 }).data as {
          traceparent?: string;
        }
      ).traceparent;
    });
    expect(carried).toMatch(/^00-[0-9a-f]{32}-[0-9a-f]{16}-01$/);
    await inSpan('effect', { traceparent: carried, sessionId: 's' }, async () => undefined);
    const [cause, effect] = exporter.getFinishedSpans();
    expect(effect?.parentSpanContext?.spanId).toBe(parentId);
    expect(effect?.spanContext().traceId).toBe(cause?.spanContext().traceId);
  });

  it('with no tracer provider (tracing off) a job made in a span carries nothing', async () => {
    trace.disable();
    context.disable();
    const data = await inSpan('cause', { sessionId: 's' }, async () =>
      Promise.resolve(outboxJob('plan', 'plan', 'plan|s|0', { sessionId: 's', attempt: 0 }).data),
    );
    expect(data).toEqual({ sessionId: 's', attempt: 0 });
    expect(exporter.getFinishedSpans()).toEqual([]);
  });

  it('ignores a malformed traceparent', () => {
    expect(parseTraceparent('00-xyz')).toBeUndefined();
    expect(parseTraceparent(`00-${'0'.repeat(32)}-${'1'.repeat(16)}-01`)).toBeUndefined();
    expect(parseTraceparent(42)).toBeUndefined();
  });
});

describe('chat spans (GenAI conventions)', () => {
  it('names the call chat {model} with the provider, models, tokens, finish reasons and session, and no content', async () => {
    const outcomes: ModelCallOutcome[] = [];
    const traced = tracedChat(answering, target, { modelCall: (_, o) => void outcomes.push(o) });
    await inSpan('job', { sessionId: 'sess-1' }, () => traced.complete(request));
    const chat = exporter.getFinishedSpans().find((s) => s.name === 'chat m-test');
    expect(chat?.attributes).toMatchObject({
      'gen_ai.operation.name': 'chat',
      'gen_ai.provider.name': 'openai',
      'gen_ai.request.model': 'm-test',
      'gen_ai.response.model': 'm-test-2026',
      'gen_ai.usage.input_tokens': 11,
      'gen_ai.usage.output_tokens': 7,
      'gen_ai.response.finish_reasons': ['stop'],
      'gen_ai.conversation.id': 'sess-1',
      'server.address': '127.0.0.1',
      'server.port': 8080,
    });
    expect(Object.keys(chat?.attributes ?? {}).filter((k) => k.includes('messages'))).toEqual([]);
    expect(outcomes).toMatchObject([{ usage: { inputTokens: 11, outputTokens: 7 } }]);
  });

  it('records prompts and replies only when content capture is turned on', async () => {
    process.env.OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT = 'true';
    await tracedChat(answering, target).complete(request);
    const [chat] = exporter.getFinishedSpans();
    expect(JSON.parse(String(chat?.attributes['gen_ai.input.messages']))).toEqual([
      { role: 'user', parts: [{ type: 'text', content: 'plan the parser' }] },
    ]);
    expect(String(chat?.attributes['gen_ai.system_instructions'])).toContain('You plan.');
    expect(String(chat?.attributes['gen_ai.output.messages'])).toContain('{\\"tasks\\":[]}');
  });

  it('marks a failed call with its error type and the tokens it was still billed', async () => {
    const cut: ChatProvider = {
      label: 'openai:m-test',
      complete: () =>
        Promise.reject(
          callFailure(
            'reply',
            {
              role: 'planner',
              provider: 'openai',
              label: 'openai:m-test',
              timeoutMs: 1,
              maxRetries: 0,
            },
            { message: 'cut off', usage: { inputTokens: 5, outputTokens: 9 }, truncated: true },
          ),
        ),
    };
    await expect(tracedChat(cut, target).complete(request)).rejects.toThrow(/cut off/);
    const [chat] = exporter.getFinishedSpans();
    expect(chat?.status.code).toBe(2);
    expect(chat?.attributes['error.type']).toBeTypeOf('string');
    expect(chat?.attributes['gen_ai.usage.output_tokens']).toBe(9);
  });
});

describe.each([
  ['openai', 'stop'],
  ['anthropic', 'end_turn'],
] as const)('chat spans of the %s provider', (protocol, finishReason) => {
  it('carry the model and finish reason the server answered with, and its tokens', async () => {
    const server = await startFakeLlmServer(protocol, () => ({
      json: { score: 90, isAcceptable: true, issues: [], suggestions: [] },
    }));
    try {
      const config = parseConfig({
        llm: { default: { provider: protocol, model: 'm-test', baseUrl: server.baseUrl } },
      }).llm.default;
      const provider = tracedChat(createChatProvider('judge', config), {
        provider: protocol,
        model: 'm-test',
        role: 'judge',
        baseUrl: config.baseUrl,
      });
      await provider.complete({
        ...request,
        role: 'judge',
        schema: QualityJudgement,
        schemaName: 'QualityJudgement',
        timeoutMs: 10_000,
      });
    } finally {
      await server.close();
    }
    const [chat] = exporter.getFinishedSpans();
    expect(chat?.attributes).toMatchObject({
      'gen_ai.provider.name': protocol,
      'gen_ai.response.model': 'm-test',
      'gen_ai.response.finish_reasons': [finishReason],
      'gen_ai.usage.input_tokens': FAKE_USAGE.input,
      'gen_ai.usage.output_tokens': FAKE_USAGE.output,
    });
  });
});

describe('tool spans', () => {
  it('runs each tool call in an execute_tool span, an MCP tool as an extension, a refused call as an error', async () => {
    const toolbox = new Toolbox([
      {
        spec: { name: 'read_file', description: '', inputSchema: {} },
        call: async () => ({ ok: true, output: 'text' }),
      },
      {
        extension: true,
        spec: { name: 'calc__add', description: '', inputSchema: {} },
        call: async () => ({ ok: false, error: 'bad input' }),
      },
    ]);
    const signal = new AbortController().signal;
    await toolbox.call('read_file', { path: 'a' }, signal);
    await toolbox.call('calc__add', {}, signal);
    const spans = exporter.getFinishedSpans();
    expect(spans.map((s) => [s.name, s.attributes['gen_ai.tool.type'], s.status.code])).toEqual([
      ['execute_tool read_file', 'function', 0],
      ['execute_tool calc__add', 'extension', 2],
    ]);
    expect(spans[0]?.attributes['gen_ai.tool.call.arguments']).toBeUndefined();
  });
});

describe('agent spans', () => {
  it("runs an agent's loop in an invoke_agent span, its tool calls under it, in the session's conversation", async () => {
    const toolbox = new Toolbox([
      {
        spec: { name: 'list_files', description: '', inputSchema: {} },
        call: async () => ({ ok: true, output: '' }),
      },
    ]);
    await inSpan('worker execute', { sessionId: 'sess-2' }, () =>
      inAgentSpan('orq-agent', { 'orq.task.id': 't1' }, () =>
        toolbox.call('list_files', {}, new AbortController().signal),
      ),
    );
    const [tool, agent] = exporter.getFinishedSpans();
    expect(agent?.name).toBe('invoke_agent orq-agent');
    expect(agent?.attributes).toMatchObject({
      'gen_ai.operation.name': 'invoke_agent',
      'gen_ai.agent.name': 'orq-agent',
      'gen_ai.conversation.id': 'sess-2',
      'orq.task.id': 't1',
    });
    expect(tool?.parentSpanContext?.spanId).toBe(agent?.spanContext().spanId);
  });
});

describe('when tracing is on', () => {
  const endpoint = { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://localhost:4318' };
  it('only with an OTLP endpoint set, for all signals or for traces', () => {
    expect(tracingWanted({})).toBe(false);
    expect(tracingWanted(endpoint)).toBe(true);
    expect(
      tracingWanted({ OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'http://localhost:4318/v1/traces' }),
    ).toBe(true);
  });

  it('not when the SDK is disabled or the traces exporter is none', () => {
    expect(tracingWanted({ ...endpoint, OTEL_SDK_DISABLED: 'true' })).toBe(false);
    expect(tracingWanted({ ...endpoint, OTEL_TRACES_EXPORTER: 'none' })).toBe(false);
  });
});

describe('the OTLP encoding', () => {
  it('is http/protobuf unless a protocol variable says http/json, the traces one first', () => {
    expect(tracesProtocol({})).toBe('http/protobuf');
    expect(tracesProtocol({ OTEL_EXPORTER_OTLP_PROTOCOL: '' })).toBe('http/protobuf');
    expect(tracesProtocol({ OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json' })).toBe('http/json');
    expect(
      tracesProtocol({
        OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
        OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: 'http/protobuf',
      }),
    ).toBe('http/protobuf');
    expect(tracesProtocol({ OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: ' http/json ' })).toBe('http/json');
  });

  it('refuses grpc and unknown values, naming the variable and what it takes', () => {
    const refusal = (env: NodeJS.ProcessEnv): OrqError => {
      try {
        tracesProtocol(env);
      } catch (error) {
        if (error instanceof OrqError) return error;
      }
      throw new Error('no OrqError');
    };
    const grpc = refusal({ OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc' });
    expect(grpc.code).toBe('CONFIG_INVALID');
    expect(grpc.message).toContain('OTEL_EXPORTER_OTLP_PROTOCOL=grpc is not supported');
    expect(grpc.message).toContain('http/protobuf or http/json');
    expect(grpc.hint).toContain('4318');
    const typo = refusal({
      OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
      OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: 'http/proto',
    });
    expect(typo.details).toMatchObject({
      variable: 'OTEL_EXPORTER_OTLP_TRACES_PROTOCOL',
      value: 'http/proto',
    });
  });

  it('is checked only when tracing is on', async () => {
    await expect(startTracing({ OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc' })).resolves.toBeUndefined();
    await stopTracing();
  });
});
