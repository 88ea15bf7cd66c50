import {
  context,
  createContextKey,
  SpanKind,
  SpanStatusCode,
  trace,
  TraceFlags,
  type Attributes,
  type Context,
  type Span,
  type SpanContext,
} from '@opentelemetry/api';
import { ORQ_VERSION } from '../version.js';

/**
 * orq's spans, through the OpenTelemetry API only. Without an SDK (tracing off: sdk.ts loads
 * one only when an OTLP endpoint is set) the API's tracer is a no-op: spans record nothing,
 * no context is carried, and job data gets no `traceparent`.
 */
export const tracer = () => trace.getTracer('orq', ORQ_VERSION);

/** The session a span belongs to, for `gen_ai.conversation.id` of the model calls under it. */
const SESSION_KEY = createContextKey('orq.session.id');

export function sessionOf(ctx: Context = context.active()): string | undefined {
  return ctx.getValue(SESSION_KEY) as string | undefined;
}

// ---- W3C trace context in job data --------------------------------------------------------
// A job's data carries the `traceparent` of the span that enqueued it, so the span of its
// processing, on any pod, is that span's child: one tree per session across every queue hop.

const TRACEPARENT = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/;

/** The W3C `traceparent` of the active span; undefined when there is none (tracing off). */
export function currentTraceparent(): string | undefined {
  const span = trace.getSpan(context.active());
  if (!span) return undefined;
  const { traceId, spanId, traceFlags } = span.spanContext();
  if (!trace.isSpanContextValid(span.spanContext())) return undefined;
  return `00-${traceId}-${spanId}-${(traceFlags & 0xff).toString(16).padStart(2, '0')}`;
}

/** The remote span context a `traceparent` names; undefined for none or a malformed one. */
export function parseTraceparent(value: unknown): SpanContext | undefined {
  if (typeof value !== 'string') return undefined;
  const match = TRACEPARENT.exec(value);
  if (!match) return undefined;
  const spanContext: SpanContext = {
    traceId: match[1] as string,
    spanId: match[2] as string,
    traceFlags: parseInt(match[3] as string, 16) & TraceFlags.SAMPLED,
    isRemote: true,
  };
  return trace.isSpanContextValid(spanContext) ? spanContext : undefined;
}

/** `data` with the active span's traceparent, when there is one; as it is otherwise. */
export function withTraceparent<T extends object>(data: T): T | (T & { traceparent: string }) {
  const traceparent = currentTraceparent();
  return traceparent ? { ...data, traceparent } : data;
}

// ---- spans ---------------------------------------------------------------------------------

export interface SpanOptions {
  kind?: SpanKind;
  attributes?: Attributes;
  /** The parent: a traceparent carried in job data; the active span when absent. */
  traceparent?: unknown;
  /** The session the work is for: model calls under this span name it as their conversation. */
  sessionId?: string | undefined;
}

/**
 * Runs `work` in a span that ends when it settles: an error marks it failed (unless `isError`
 * says the error is control flow) and is rethrown.
 */
export async function inSpan<T>(
  name: string,
  options: SpanOptions,
  work: (span: Span) => Promise<T>,
  isError: (error: unknown) => boolean = () => true,
): Promise<T> {
  const remote = parseTraceparent(options.traceparent);
  const active = context.active();
  let parent = remote ? trace.setSpanContext(active, remote) : active;
  const span = tracer().startSpan(
    name,
    {
      kind: options.kind ?? SpanKind.INTERNAL,
      ...(options.attributes ? { attributes: options.attributes } : {}),
    },
    parent,
  );
  // Tracing off (the API's no-op tracer, no context carried in): nothing to record or pass on,
  // so no context is built either. A span the sampler dropped still has a valid context, which
  // its children must see to be dropped alike.
  if (!span.isRecording() && !trace.isSpanContextValid(span.spanContext())) return work(span);
  if (options.sessionId) parent = parent.setValue(SESSION_KEY, options.sessionId);
  try {
    return await context.with(trace.setSpan(parent, span), () => work(span));
  } catch (error) {
    if (isError(error)) failSpan(span, error);
    throw error;
  } finally {
    span.end();
  }
}

/** Marks a span failed with the error's type and message (`error.type` of the conventions). */
export function failSpan(span: Span, error: unknown): void {
  const type =
    error instanceof Error ? ((error as { code?: unknown }).code ?? error.name) : 'Error';
  span.setAttribute('error.type', String(type));
  span.setStatus({
    code: SpanStatusCode.ERROR,
    message: error instanceof Error ? error.message : String(error),
  });
}

export { SpanKind };
