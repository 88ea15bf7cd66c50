import {
  startHttpServer,
  type StartHttpServerOptions,
  type RunningHttpServer,
} from '../../src/producers/http/server.js';
import type { OrqClient } from '../../src/producers/client.js';

/**
 * The HTTP API of a test: on loopback, on a port the system picks, over the test's client.
 * Without `token` in `options` it asks for none (a server on loopback may run without).
 */
export function serveApi(
  client: OrqClient,
  options: Omit<StartHttpServerOptions, 'client' | 'host' | 'port'> = {},
): Promise<RunningHttpServer> {
  return startHttpServer({ client, host: '127.0.0.1', port: 0, ...options });
}

/** The header that presents `token` to the API. */
export const bearer = (token: string) => ({ authorization: `Bearer ${token}` });

/** POSTs `body` as JSON to the API at `path`, presenting `token`. */
export const postAs = (
  server: RunningHttpServer,
  path: string,
  token: string,
  body: unknown = {},
): Promise<Response> =>
  fetch(`${server.url}${path}`, {
    method: 'POST',
    headers: { ...bearer(token), 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
