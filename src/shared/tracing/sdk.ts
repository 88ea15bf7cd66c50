/**
 * The OpenTelemetry SDK, loaded only when the environment asks for traces: an OTLP endpoint
 * (OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) is set, and neither
 * OTEL_SDK_DISABLED=true nor OTEL_TRACES_EXPORTER=none says otherwise. The encoding is the
 * spec's OTEL_EXPORTER_OTLP_(TRACES_)PROTOCOL, http/protobuf by default. Everything else (batch
 * sizes and delay, headers, sampler, service name, resource) is read by the SDK from the
 * standard OTEL_* variables. Without it nothing is imported and the API stays a no-op.
 */
import { z } from 'zod';
import { OrqError } from '../errors.js';

export interface Tracing {
  /** Sends the spans still buffered and stops the exporter. */
  shutdown(): Promise<void>;
}

/** Whether `env` asks for traces over OTLP. */
export function tracingWanted(env: NodeJS.ProcessEnv = process.env): boolean {
  if (env.OTEL_SDK_DISABLED?.trim().toLowerCase() === 'true') return false;
  const exporters = (env.OTEL_TRACES_EXPORTER ?? 'otlp').split(',').map((e) => e.trim());
  if (!exporters.includes('otlp')) return false;
  return Boolean(env.OTEL_EXPORTER_OTLP_ENDPOINT || env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT);
}

/** The OTLP encodings orq exports traces in; the spec's default is http/protobuf. */
export const OtlpProtocol = z.enum(['http/protobuf', 'http/json']);
export type OtlpProtocol = z.infer<typeof OtlpProtocol>;

/**
 * The encoding `env` asks for: OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, else
 * OTEL_EXPORTER_OTLP_PROTOCOL, else http/protobuf (an empty value counts as unset, as the spec
 * says). grpc and any other value are refused, naming the variable that set it.
 */
export function tracesProtocol(env: NodeJS.ProcessEnv = process.env): OtlpProtocol {
  for (const name of ['OTEL_EXPORTER_OTLP_TRACES_PROTOCOL', 'OTEL_EXPORTER_OTLP_PROTOCOL']) {
    const value = env[name]?.trim();
    if (!value) continue;
    const parsed = OtlpProtocol.safeParse(value);
    if (parsed.success) return parsed.data;
    throw new OrqError(
      'CONFIG_INVALID',
      `${name}=${value} is not supported: orq exports traces over OTLP/HTTP as ${OtlpProtocol.options.join(' or ')}`,
      {
        hint:
          value === 'grpc'
            ? `Unset ${name} (http/protobuf is the default) and point OTEL_EXPORTER_OTLP_ENDPOINT at the collector's OTLP/HTTP port, usually 4318`
            : `Set ${name} to ${OtlpProtocol.options.join(' or ')}, or unset it for http/protobuf`,
        details: { variable: name, value, supported: OtlpProtocol.options },
      },
    );
  }
  return 'http/protobuf';
}

let running: Promise<Tracing | undefined> | undefined;

/**
 * Starts tracing once per process when `env` asks for it: a tracer provider with a batch
 * processor over the OTLP/HTTP exporter of the protocol asked for, registered as the global
 * provider with an AsyncLocalStorage context manager. Resolves undefined when tracing is off;
 * throws CONFIG_INVALID at once for a protocol orq does not export (grpc).
 */
export function startTracing(env: NodeJS.ProcessEnv = process.env): Promise<Tracing | undefined> {
  running ??= tracingWanted(env) ? load(env, tracesProtocol(env)) : Promise.resolve(undefined);
  return running;
}

/** Flushes and stops tracing if it was started (a pod's shutdown, a command's end). */
export async function stopTracing(): Promise<void> {
  const tracing = await running;
  running = undefined;
  await tracing?.shutdown();
}

async function load(env: NodeJS.ProcessEnv, protocol: OtlpProtocol): Promise<Tracing> {
  const [{ NodeTracerProvider, BatchSpanProcessor }, { OTLPTraceExporter }, resources] =
    await Promise.all([
      import('@opentelemetry/sdk-trace-node'),
      // Both read the endpoint, headers, timeout and compression from OTEL_* themselves.
      protocol === 'http/json'
        ? import('@opentelemetry/exporter-trace-otlp-http')
        : import('@opentelemetry/exporter-trace-otlp-proto'),
      import('@opentelemetry/resources'),
    ]);
  const { ORQ_VERSION } = await import('../version.js');
  // OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES (envDetector) override orq's defaults.
  const resource = resources
    .resourceFromAttributes({ 'service.name': 'orq', 'service.version': ORQ_VERSION })
    .merge(resources.detectResources({ detectors: [resources.envDetector] }));
  const named = env.OTEL_SERVICE_NAME
    ? resource.merge(resources.resourceFromAttributes({ 'service.name': env.OTEL_SERVICE_NAME }))
    : resource;
  const provider = new NodeTracerProvider({
    resource: named,
    spanProcessors: [new BatchSpanProcessor(new OTLPTraceExporter())],
  });
  provider.register();
  return { shutdown: () => provider.shutdown() };
}
