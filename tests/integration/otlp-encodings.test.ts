import { context, SpanKind, SpanStatusCode, trace } from '@opentelemetry/api';
import { OTLPTraceExporter as JsonExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { OTLPTraceExporter as ProtobufExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { NodeTracerProvider, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-node';
import { afterEach, describe, expect, it } from 'vitest';
import { startOtlpReceiver, type OtlpReceiver } from '../support/otlp-receiver.js';

const receivers: OtlpReceiver[] = [];
afterEach(async () => {
  await Promise.all(receivers.splice(0).map((r) => r.close()));
});

/**
 * The same two spans exported by both official exporters, each to its own receiver: the
 * e2e tracing test runs a session in each encoding, and this checks that the receiver reads
 * both the same, value type by value type.
 */
describe('the OTLP receiver the tracing tests use', () => {
  it('decodes the protobuf and the JSON exporter alike', async () => {
    const protobufReceiver = await startOtlpReceiver();
    const jsonReceiver = await startOtlpReceiver();
    receivers.push(protobufReceiver, jsonReceiver);
    const provider = new NodeTracerProvider({
      resource: resourceFromAttributes({ 'service.name': 'encodings' }),
      spanProcessors: [
        new SimpleSpanProcessor(new ProtobufExporter({ url: `${protobufReceiver.url}/v1/traces` })),
        new SimpleSpanProcessor(new JsonExporter({ url: `${jsonReceiver.url}/v1/traces` })),
      ],
    });
    const tracer = provider.getTracer('encodings');
    const parent = tracer.startSpan('submit_session');
    const child = tracer.startSpan(
      'chat m-test',
      {
        kind: SpanKind.CLIENT,
        attributes: {
          'gen_ai.request.model': 'm-test',
          'gen_ai.usage.input_tokens': 1234567,
          'orq.score': 0.75,
          'orq.accepted': false,
          'gen_ai.response.finish_reasons': ['stop', 'length'],
        },
      },
      trace.setSpan(context.active(), parent),
    );
    child.setStatus({ code: SpanStatusCode.ERROR });
    child.end();
    parent.end();
    await provider.forceFlush();
    await provider.shutdown();

    expect(new Set(protobufReceiver.contentTypes)).toEqual(new Set(['application/x-protobuf']));
    expect(new Set(jsonReceiver.contentTypes)).toEqual(new Set(['application/json']));
    const byName = (receiver: OtlpReceiver) =>
      [...receiver.spans].sort((a, b) => a.name.localeCompare(b.name));
    const decoded = byName(protobufReceiver);
    expect(decoded).toEqual(byName(jsonReceiver));

    const [chat, submit] = decoded;
    expect(submit).toMatchObject({
      name: 'submit_session',
      traceId: parent.spanContext().traceId,
      spanId: parent.spanContext().spanId,
      parentSpanId: undefined,
      kind: 1, // INTERNAL
      resource: { 'service.name': 'encodings' },
    });
    expect(chat).toMatchObject({
      name: 'chat m-test',
      traceId: parent.spanContext().traceId,
      spanId: child.spanContext().spanId,
      parentSpanId: parent.spanContext().spanId,
      kind: 3, // CLIENT
      statusCode: 2,
      attributes: {
        'gen_ai.request.model': 'm-test',
        'gen_ai.usage.input_tokens': 1234567,
        'orq.score': 0.75,
        'orq.accepted': false,
        'gen_ai.response.finish_reasons': ['stop', 'length'],
      },
    });
  });
});
