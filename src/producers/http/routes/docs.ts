import fastifySwaggerUi from '@fastify/swagger-ui';
import type { FastifyInstance } from 'fastify';
import { BOARD_PATH, DOCS_PATH } from '../auth.js';
import { UI_PATH } from '../ui/html.js';

/**
 * The API reference a person opens in a browser: Swagger UI over the OpenAPI document. Its
 * scripts and styles come with @fastify/swagger-ui (Fastify's own plugin, Node 20 like the rest
 * of the stack) and are served by this server, no CDN: the page works offline and behind a
 * firewall. Swagger UI's online validator is off (validatorUrl: null, the plugin's default).
 */
export async function registerDocsRoutes(app: FastifyInstance): Promise<void> {
  await app.register(fastifySwaggerUi, {
    routePrefix: DOCS_PATH,
    // The token a person types into "Authorize" is not kept in the browser's localStorage.
    uiConfig: { persistAuthorization: false },
    theme: { title: 'orq HTTP API' },
  });
}

const LINKS: readonly { path: string; what: string }[] = [
  { path: UI_PATH, what: 'sessions: their task graphs, plans, outputs and actions' },
  { path: DOCS_PATH, what: 'API reference (Swagger UI): every route with its request and answer' },
  { path: BOARD_PATH, what: 'Bull Board: the queues and their jobs' },
  { path: '/openapi.json', what: 'the OpenAPI document, for code generators' },
  { path: '/metrics', what: 'Prometheus metrics' },
  { path: '/healthz', what: 'liveness probe (no token)' },
];

/** The index at `/`: links only, so it is served without a token, and says how to sign in. */
export function indexPage(tokenRequired: boolean): string {
  const items = LINKS.map(
    ({ path, what }) => `<li><a href="${path}">${path}</a> — ${what}</li>`,
  ).join('\n');
  const auth = tokenRequired
    ? `<p>This server needs its API token. In a browser, open
<code>${UI_PATH}?token=&lt;ORQ_API_TOKEN&gt;</code> (or <code>${BOARD_PATH}?token=…</code>, <code>${DOCS_PATH}?token=…</code>) once:
it sets a cookie for the three pages. Programs send <code>Authorization: Bearer &lt;ORQ_API_TOKEN&gt;</code>.</p>`
    : '<p>This server has no API token: it listens on this machine only.</p>';
  return `<!DOCTYPE html>
<html lang="en">
<head><meta charset="utf-8"><title>orq HTTP API</title></head>
<body>
<h1>orq HTTP API</h1>
<ul>
${items}
</ul>
${auth}
</body>
</html>
`;
}

export function registerIndexRoute(app: FastifyInstance, tokenRequired: boolean): void {
  const page = indexPage(tokenRequired);
  app.get('/', { schema: { hide: true } }, async (_request, reply) =>
    reply.type('text/html; charset=utf-8').send(page),
  );
}
