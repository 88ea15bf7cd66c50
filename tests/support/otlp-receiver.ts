import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import protobuf from 'protobufjs';

/**
 * A real OTLP/HTTP trace receiver on 127.0.0.1: it takes what the official exporters POST to
 * /v1/traces, an ExportTraceServiceRequest in either encoding (by its content type): protobuf
 * (@opentelemetry/exporter-trace-otlp-proto, decoded by protobufjs) or JSON
 * (@opentelemetry/exporter-trace-otlp-http), and keeps every span decoded.
 */

export type AttributeValue = string | number | boolean | AttributeValue[] | undefined;

export interface ReceivedSpan {
  traceId: string;
  spanId: string;
  /** Undefined for a root span. */
  parentSpanId: string | undefined;
  name: string;
  kind: number;
  attributes: Record<string, AttributeValue>;
  /** The exporting process's resource (service.name...). */
  resource: Record<string, AttributeValue>;
  /** 2: error. */
  statusCode: number;
}

export interface OtlpReceiver {
  /** The base URL to give as OTEL_EXPORTER_OTLP_ENDPOINT. */
  url: string;
  spans: ReceivedSpan[];
  /** Content types of the requests received. */
  contentTypes: string[];
  close(): Promise<void>;
}

interface AnyValue {
  stringValue?: string;
  intValue?: string | number;
  doubleValue?: number;
  boolValue?: boolean;
  arrayValue?: { values?: AnyValue[] };
}

interface KeyValue {
  key: string;
  value: AnyValue;
}

function decodeValue(value: AnyValue): AttributeValue {
  if (value.stringValue !== undefined) return value.stringValue;
  if (value.intValue !== undefined) return Number(value.intValue);
  if (value.doubleValue !== undefined) return value.doubleValue;
  if (value.boolValue !== undefined) return value.boolValue;
  if (value.arrayValue) return (value.arrayValue.values ?? []).map(decodeValue);
  return undefined;
}

const decodeAttributes = (list: KeyValue[] | undefined) =>
  Object.fromEntries((list ?? []).map((kv) => [kv.key, decodeValue(kv.value)]));

interface ExportRequest {
  resourceSpans?: {
    resource?: { attributes?: KeyValue[] };
    scopeSpans?: {
      spans?: {
        traceId: string;
        spanId: string;
        parentSpanId?: string;
        name: string;
        kind: number;
        attributes?: KeyValue[];
        status?: { code?: number };
      }[];
    }[];
  }[];
}

/**
 * The messages and fields this receiver reads, as opentelemetry-proto v1 numbers them
 * (collector/trace/v1/trace_service.proto and the trace, resource and common protos it imports).
 * protobufjs skips every field not declared here; enums are read as their numbers.
 */
const OTLP_TRACE_SUBSET = `
syntax = "proto3";
package otlp;
message ExportTraceServiceRequest { repeated ResourceSpans resource_spans = 1; }
message ResourceSpans { Resource resource = 1; repeated ScopeSpans scope_spans = 2; }
message Resource { repeated KeyValue attributes = 1; }
message ScopeSpans { repeated Span spans = 2; }
message Span {
  bytes trace_id = 1;
  bytes span_id = 2;
  bytes parent_span_id = 4;
  string name = 5;
  int32 kind = 6;
  repeated KeyValue attributes = 9;
  Status status = 15;
}
message Status { int32 code = 3; }
message KeyValue { string key = 1; AnyValue value = 2; }
message AnyValue {
  oneof value {
    string string_value = 1;
    bool bool_value = 2;
    int64 int_value = 3;
    double double_value = 4;
    ArrayValue array_value = 5;
  }
}
message ArrayValue { repeated AnyValue values = 1; }
`;

const ExportTraceServiceRequest = protobuf
  .parse(OTLP_TRACE_SUBSET)
  .root.lookupType('otlp.ExportTraceServiceRequest');

const toHex = (base64: string | undefined) => Buffer.from(base64 ?? '', 'base64').toString('hex');

/**
 * A protobuf body as the JSON encoding spells it: camelCase fields, ids in hex, 64-bit integers
 * as numbers, unset fields left out.
 */
function decodeProtobuf(body: Buffer): ExportRequest {
  const message = ExportTraceServiceRequest.decode(body);
  const request = ExportTraceServiceRequest.toObject(message, {
    longs: Number,
    bytes: String,
  }) as ExportRequest;
  for (const rs of request.resourceSpans ?? []) {
    for (const ss of rs.scopeSpans ?? []) {
      for (const span of ss.spans ?? []) {
        span.traceId = toHex(span.traceId);
        span.spanId = toHex(span.spanId);
        span.parentSpanId = toHex(span.parentSpanId);
      }
    }
  }
  return request;
}

/** The request in the encoding its content type names; JSON is the OTLP/HTTP JSON mapping. */
function decodeRequest(contentType: string, body: Buffer): ExportRequest {
  if (contentType.startsWith('application/x-protobuf')) return decodeProtobuf(body);
  return JSON.parse(body.toString('utf8')) as ExportRequest;
}

export async function startOtlpReceiver(): Promise<OtlpReceiver> {
  const state: OtlpReceiver = {
    url: '',
    spans: [],
    contentTypes: [],
    close: async () => undefined,
  };
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      if (req.method !== 'POST' || req.url !== '/v1/traces') {
        res.writeHead(404).end();
        return;
      }
      const contentType = req.headers['content-type'] ?? '';
      state.contentTypes.push(contentType);
      const body = decodeRequest(contentType, Buffer.concat(chunks));
      for (const rs of body.resourceSpans ?? []) {
        const resource = decodeAttributes(rs.resource?.attributes);
        for (const ss of rs.scopeSpans ?? []) {
          for (const span of ss.spans ?? []) {
            state.spans.push({
              traceId: span.traceId,
              spanId: span.spanId,
              parentSpanId: span.parentSpanId || undefined,
              name: span.name,
              kind: span.kind,
              attributes: decodeAttributes(span.attributes),
              resource,
              statusCode: span.status?.code ?? 0,
            });
          }
        }
      }
      // An empty ExportTraceServiceResponse, in the request's encoding.
      res.writeHead(200, { 'content-type': contentType || 'application/json' });
      res.end(contentType.startsWith('application/x-protobuf') ? '' : '{}');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  state.url = `http://127.0.0.1:${port}`;
  state.close = () =>
    new Promise((resolve) => {
      server.closeAllConnections();
      server.close(() => resolve());
    });
  return state;
}
