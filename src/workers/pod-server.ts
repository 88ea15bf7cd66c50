import { createServer, type Server } from 'node:http';
import type { RoleMetrics } from './metrics.js';
import { listenError } from '../shared/listen-error.js';
import { podHealth, type PodHealth } from './pod-health.js';

export interface PodServer {
  url: string;
  /** Where /readyz asks from now on; until this is called it answers `starting`. */
  setHealth(health: () => Promise<PodHealth>): void;
  close(): Promise<void>;
}

export interface PodServerOptions {
  host: string;
  port: number;
  metrics: RoleMetrics;
}

/**
 * A pod's HTTP listener (`orq start --metrics-port`): GET /metrics for Prometheus, /healthz
 * (liveness: 200 while the process answers) and /readyz (readiness: 200 while its consumers
 * run and Redis answers, 503 with the reason otherwise). Counts and states only, no session data.
 */
export async function startPodServer(options: PodServerOptions): Promise<PodServer> {
  const { metrics } = options;
  let health = async () => podHealth({ phase: 'starting', consumers: [] });
  const json = (status: number, body: unknown) => ({
    status,
    type: 'application/json',
    text: JSON.stringify(body),
  });
  const routes: Record<string, () => Promise<{ status: number; type: string; text: string }>> = {
    '/metrics': async () => ({
      status: 200,
      type: metrics.registry.contentType,
      text: await metrics.registry.metrics(),
    }),
    '/healthz': async () => json(200, { status: 'ok' }),
    '/readyz': async () => {
      const state = await health();
      return json(state.status === 'ok' ? 200 : 503, state);
    },
  };
  const server: Server = createServer((request, response) => {
    const route = request.method === 'GET' ? routes[request.url?.split('?')[0] ?? ''] : undefined;
    if (!route) {
      response.writeHead(404).end();
      return;
    }
    route().then(
      ({ status, type, text }) => response.writeHead(status, { 'content-type': type }).end(text),
      () => response.writeHead(500).end(),
    );
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', (error) =>
      reject(
        listenError(error, {
          host: options.host,
          port: options.port,
          portOption: '--metrics-port',
          hostOption: '--metrics-host',
        }),
      ),
    );
    server.listen(options.port, options.host, () => resolve());
  });
  const address = server.address();
  const port = typeof address === 'object' && address ? address.port : options.port;
  return {
    url: `http://${options.host}:${port}`,
    setHealth: (next) => {
      health = next;
    },
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}
