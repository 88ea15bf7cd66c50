import type { FastifyInstance } from 'fastify';

/**
 * Headers on every answer (issue 41): no page of this server may be framed by another site
 * (clickjacking Bull Board's buttons), and a browser sniffs no type. A page (text/html) may load
 * scripts, styles and images from this server only: Bull Board and Swagger UI are served from
 * it, and both set inline styles. Any other answer (JSON, metrics) may load nothing at all.
 */
export const PAGE_CSP =
  "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; font-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'self'; form-action 'self'; frame-ancestors 'none'";
export const DATA_CSP = "default-src 'none'; frame-ancestors 'none'";

export function installSecurityHeaders(app: FastifyInstance): void {
  app.addHook('onSend', async (_request, reply, payload) => {
    const type = String(reply.getHeader('content-type') ?? '');
    // A route that sets its own policy keeps it.
    if (!reply.hasHeader('content-security-policy')) {
      reply.header('content-security-policy', type.startsWith('text/html') ? PAGE_CSP : DATA_CSP);
    }
    reply.header('x-frame-options', 'DENY');
    reply.header('x-content-type-options', 'nosniff');
    reply.header('referrer-policy', 'no-referrer');
    return payload;
  });
}
