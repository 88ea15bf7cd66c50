import type { Attributes, Span } from '@opentelemetry/api';
import type { TokenUsage } from '../../shared/domain/task.js';
import { usageOfFailure, type ChatProvider, type ChatRequest } from './chat.js';
import type { ModelRole } from '../../shared/config/roles.js';
import { inSpan, sessionOf, SpanKind } from '../../shared/tracing/trace.js';

/**
 * Model calls and tools in the OpenTelemetry GenAI semantic conventions (v1.45.0, the set of
 * @opentelemetry/semantic-conventions 1.45; status Development): `chat {model}` client spans with
 * gen_ai.* attributes, `invoke_agent` and `execute_tool` spans, and the
 * gen_ai.client.token.usage and gen_ai.client.operation.duration metrics. Prompt and completion
 * content is left out unless OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true.
 */

/** Which model a call goes to: the labels of its span and its metrics. */
export interface ModelTarget {
  /** gen_ai.provider.name: openai, anthropic. */
  provider: string;
  model: string;
  role: ModelRole;
  /** The server's base URL, for server.address and server.port. */
  baseUrl?: string | undefined;
}

/** One model call, as the pod's metrics count it. */
export interface ModelCallOutcome {
  seconds: number;
  /** Undefined when the call failed before any token was billed. */
  usage: TokenUsage | undefined;
  /** error.type of a failed call. */
  errorType?: string;
}

/** What a pod's metrics observe of every model call (workers/metrics.ts). */
export interface ModelCallEvents {
  modelCall(target: ModelTarget, outcome: ModelCallOutcome): void;
}

/** Whether prompt and completion content may go into spans (off by default: it may be private). */
export const captureContent = (env: NodeJS.ProcessEnv = process.env): boolean =>
  env.OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT?.trim().toLowerCase() === 'true';

function serverOf(baseUrl: string | undefined): Attributes {
  if (!baseUrl) return {};
  try {
    const url = new URL(baseUrl);
    const port = url.port ? Number(url.port) : url.protocol === 'https:' ? 443 : 80;
    return { 'server.address': url.hostname, 'server.port': port };
  } catch {
    return {};
  }
}

function inputMessages(request: ChatRequest): string {
  const text = (content: string) => [{ type: 'text', content }];
  const messages = [{ role: 'user', parts: text(request.user) }];
  if (request.followUp) {
    messages.push(
      { role: 'assistant', parts: text(request.followUp.reply) },
      { role: 'user', parts: text(request.followUp.correction) },
    );
  }
  return JSON.stringify(messages);
}

/**
 * `provider` with a `chat {model}` span around each call, under the job's span, and the call
 * told to `events` (the pod's gen_ai metrics).
 */
export function tracedChat(
  provider: ChatProvider,
  target: ModelTarget,
  events?: ModelCallEvents,
): ChatProvider {
  const fixed: Attributes = {
    'gen_ai.operation.name': 'chat',
    'gen_ai.provider.name': target.provider,
    'gen_ai.request.model': target.model,
    'orq.role': target.role,
    ...serverOf(target.baseUrl),
  };
  const capture = captureContent();
  return {
    label: provider.label,
    complete: (request) => {
      const started = performance.now();
      const attributes: Attributes = { ...fixed, 'gen_ai.output.type': 'json' };
      const sessionId = sessionOf();
      if (sessionId) attributes['gen_ai.conversation.id'] = sessionId;
      if (request.temperature !== undefined) {
        attributes['gen_ai.request.temperature'] = request.temperature;
      }
      if (capture) {
        attributes['gen_ai.system_instructions'] = JSON.stringify([
          { type: 'text', content: request.system },
        ]);
        attributes['gen_ai.input.messages'] = inputMessages(request);
      }
      return inSpan(`chat ${target.model}`, { kind: SpanKind.CLIENT, attributes }, async (span) => {
        try {
          const completion = await provider.complete(request);
          recordUsage(span, completion.usage);
          if (completion.responseModel) {
            span.setAttribute('gen_ai.response.model', completion.responseModel);
          }
          if (completion.finishReasons) {
            span.setAttribute('gen_ai.response.finish_reasons', completion.finishReasons);
          }
          if (capture) {
            span.setAttribute(
              'gen_ai.output.messages',
              JSON.stringify([
                {
                  role: 'assistant',
                  parts: [{ type: 'text', content: completion.raw }],
                  finish_reason: completion.finishReasons?.[0] ?? 'stop',
                },
              ]),
            );
          }
          events?.modelCall(target, {
            seconds: (performance.now() - started) / 1000,
            usage: completion.usage,
          });
          return completion;
        } catch (error) {
          // A failed call may still have been billed (a reply cut off, a refusal).
          const usage = usageOfFailure(error);
          if (usage) recordUsage(span, usage);
          events?.modelCall(target, {
            seconds: (performance.now() - started) / 1000,
            usage,
            errorType: errorType(error),
          });
          throw error;
        }
      });
    },
    ...(provider.ready ? { ready: provider.ready.bind(provider) } : {}),
  };
}

function recordUsage(span: Span, usage: TokenUsage): void {
  span.setAttribute('gen_ai.usage.input_tokens', usage.inputTokens);
  span.setAttribute('gen_ai.usage.output_tokens', usage.outputTokens);
}

export function errorType(error: unknown): string {
  if (error instanceof Error) {
    const code = (error as { code?: unknown }).code;
    return typeof code === 'string' ? code : error.name;
  }
  return 'Error';
}

/** Runs an agent executor's loop in an `invoke_agent {name}` span. */
export function inAgentSpan<T>(name: string, attributes: Attributes, work: () => Promise<T>) {
  const sessionId = sessionOf();
  return inSpan(
    `invoke_agent ${name}`,
    {
      kind: SpanKind.INTERNAL,
      attributes: {
        'gen_ai.operation.name': 'invoke_agent',
        'gen_ai.agent.name': name,
        ...(sessionId ? { 'gen_ai.conversation.id': sessionId } : {}),
        ...attributes,
      },
    },
    work,
  );
}

/**
 * Runs one tool call in an `execute_tool {tool}` span; its arguments and result go in only
 * when content capture is on.
 */
export function inToolSpan<T>(
  tool: { name: string; type: 'function' | 'extension'; callId?: string; arguments?: unknown },
  work: (span: Span) => Promise<T>,
): Promise<T> {
  const attributes: Attributes = {
    'gen_ai.operation.name': 'execute_tool',
    'gen_ai.tool.name': tool.name,
    'gen_ai.tool.type': tool.type,
  };
  if (tool.callId) attributes['gen_ai.tool.call.id'] = tool.callId;
  const capture = captureContent();
  if (capture && tool.arguments !== undefined) {
    attributes['gen_ai.tool.call.arguments'] = JSON.stringify(tool.arguments);
  }
  return inSpan(
    `execute_tool ${tool.name}`,
    { kind: SpanKind.INTERNAL, attributes },
    async (span) => {
      const result = await work(span);
      if (capture) span.setAttribute('gen_ai.tool.call.result', JSON.stringify(result) ?? '');
      return result;
    },
  );
}
