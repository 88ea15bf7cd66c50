import type { IncomingMessage } from 'node:http';
import type { FastifyInstance } from 'fastify';

/** Largest JSON body a request may send (Fastify's default bodyLimit, stated here for the docs). */
export const BODY_LIMIT_BYTES = 1024 * 1024;

/**
 * How much of a body the server reads, and throws away, to answer a request it refused before
 * reading it (over the limit, no token, a wrong content type). Past this the socket is closed
 * as soon as the answer is written, and the client may see a reset instead of it.
 */
export const MAX_UNREAD_BODY_BYTES = 64 * 1024 * 1024;

/** Resolves once `raw` has ended, or after `limit` bytes of it have been read and dropped. */
function drained(raw: IncomingMessage, limit: number): Promise<void> {
  return new Promise((resolve) => {
    let read = 0;
    const done = () => {
      raw.off('data', onData);
      raw.off('end', done);
      raw.off('close', done);
      raw.off('error', done);
      resolve();
    };
    const onData = (chunk: Buffer) => {
      read += chunk.length;
      if (read > limit) done();
    };
    raw.on('data', onData);
    raw.once('end', done);
    raw.once('close', done);
    raw.once('error', done);
    raw.resume();
  });
}

/**
 * Answers after the request's body has arrived. Fastify answers a body over the limit at once,
 * with `Connection: close`, and Node closes the socket while the client is still sending: the
 * kernel resets the connection, and the client often loses the 413 (curl exit 55, EPIPE: 8
 * tries in 20 with a 2 MB body). Reading the rest first makes the close an orderly one, after
 * the client has sent its last byte and can read the answer.
 */
export function answerAfterUnreadBody(app: FastifyInstance): void {
  app.addHook('onSend', async (request) => {
    const raw = request.raw;
    // readableEnded as well as complete: a request made by app.inject (light-my-request) never
    // sets complete, and waiting for the end of a body already read would wait for ever.
    if (!raw.complete && !raw.readableEnded && !raw.destroyed) {
      await drained(raw, MAX_UNREAD_BODY_BYTES);
    }
  });
}
