import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';

/** A post the receiver took: its headers and raw body (the signature covers the raw body). */
export interface ReceivedPost {
  headers: IncomingMessage['headers'];
  body: string;
}

/**
 * A local webhook receiver on loopback: answers each post with the next status of `statuses`
 * (then 200), and keeps every post in order.
 */
export async function webhookReceiver(statuses: number[] = []) {
  const received: ReceivedPost[] = [];
  const server: Server = createServer((request, response) => {
    let body = '';
    request.on('data', (chunk: Buffer) => (body += chunk.toString()));
    request.on('end', () => {
      received.push({ headers: request.headers, body });
      response.statusCode = statuses.shift() ?? 200;
      response.end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/hook`,
    received,
    /** The bodies posted so far, parsed. */
    posted: () => received.map((r) => JSON.parse(r.body) as Record<string, unknown>),
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}
