import { randomUUID } from 'node:crypto';
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { createClient, type OrqClient } from '../../src/producers/client.js';
import { createHttpServer, type RunningHttpServer } from '../../src/producers/http/server.js';
import { BODY_LIMIT_BYTES } from '../../src/producers/http/unread-body.js';
import { bearer, serveApi } from '../support/http.js';

const run = promisify(execFile);
const rawPost = fileURLToPath(new URL('../fixtures/raw-post.mjs', import.meta.url));
const TOKEN = 'test-token-0123456789abcdef';

let client: OrqClient;
let server: RunningHttpServer;
let port: number;

beforeAll(async () => {
  client = await createClient({
    connection: inject('redisUrl'),
    prefix: `lim${randomUUID().slice(0, 8)}`,
  });
  server = await serveApi(client, { token: TOKEN });
  port = Number(new URL(server.url).port);
}, 30_000);

afterAll(async () => {
  await server?.close();
  await client?.close();
});

interface Sending {
  bytes: number;
  chunked: boolean;
  /** The client asks the server to close the connection after its answer. */
  close: boolean;
  token?: string;
  tries?: number;
}

/** The answers to `tries` POST /sessions sent by tests/fixtures/raw-post.mjs, in order. */
async function post({ token = TOKEN, tries = 1, ...sending }: Sending): Promise<string[]> {
  const { stdout } = await run(process.execPath, [
    rawPost,
    JSON.stringify({ port, token, tries, ...sending }),
  ]);
  return JSON.parse(stdout) as string[];
}

const statusLine = (answer: string) => answer.split('\r\n')[0];
const jsonBody = (answer: string): unknown => JSON.parse(answer.slice(answer.indexOf('\r\n\r\n')));

describe('a body over the limit', () => {
  it.each([
    ['with Content-Length, the connection kept alive', { chunked: false, close: false }],
    ['with Content-Length and Connection: close', { chunked: false, close: true }],
    ['chunked', { chunked: true, close: true }],
  ])('is answered 413 with a JSON error every time, never a reset (%s)', async (_, how) => {
    const answers = await post({ bytes: 2 * BODY_LIMIT_BYTES, tries: 20, ...how });
    for (const [i, answer] of answers.entries()) {
      expect(statusLine(answer), `try ${i + 1}`).toBe('HTTP/1.1 413 Payload Too Large');
      expect(jsonBody(answer)).toMatchObject({
        error: 'PAYLOAD_TOO_LARGE',
        hint: expect.stringContaining('1 MiB') as string,
      });
    }
  });

  it('without a token is answered 401, also after the whole body', async () => {
    const answers = await post({
      bytes: 2 * BODY_LIMIT_BYTES,
      chunked: false,
      close: true,
      token: 'wrong',
      tries: 20,
    });
    for (const [i, answer] of answers.entries()) {
      expect(statusLine(answer), `try ${i + 1}`).toBe('HTTP/1.1 401 Unauthorized');
      expect(jsonBody(answer)).toMatchObject({ error: 'UNAUTHORIZED' });
    }
  });
});
describe('a request without a socket (app.inject)', () => {
  // light-my-request never sets the request's `complete`: the hook that reads a refused body
  // must not wait for the end of a body the route already read (it did, and every injected POST
  // hung).
  it('is answered once its body was read', async () => {
    const app = await createHttpServer({ client, token: TOKEN });
    try {
      const answer = await app.inject({
        method: 'POST',
        url: '/sessions',
        headers: bearer(TOKEN),
        payload: { instruction: 'answered without a socket' },
      });
      expect(answer.statusCode).toBe(201);
    } finally {
      await app.close();
    }
  });
});

describe('an instruction over 100,000 characters', () => {
  it('is refused with 400, naming the field and the limit', async () => {
    const [answer = ''] = await post({ bytes: 100_001, chunked: false, close: true });
    expect(statusLine(answer)).toBe('HTTP/1.1 400 Bad Request');
    expect(jsonBody(answer)).toMatchObject({
      error: 'VALIDATION_FAILED',
      issues: [{ path: 'instruction', message: expect.stringContaining('100,000') as string }],
    });
  });
});

describe('a refused request body', () => {
  it('names the field and what it takes, in the words the library and the CLI use', async () => {
    const post = async (body: unknown) => {
      const res = await fetch(`${server.url}/sessions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });
      expect(res.status).toBe(400);
      return (await res.json()) as { error: string; message: string };
    };
    expect(await post({ instruction: 'x', instructon: 'y' })).toMatchObject({
      error: 'VALIDATION_FAILED',
      message: 'Invalid body: unknown key "instructon" at the top level',
    });
    expect(await post({ instruction: 42 })).toMatchObject({
      message: 'Invalid body: instruction: expected a string, got 42',
    });
  });

  it('names a query parameter and the value sent, not the NaN it became', async () => {
    const res = await fetch(`${server.url}/sessions?limit=abc`, {
      headers: bearer(TOKEN),
    });
    expect(res.status).toBe(400);
    expect(await res.json()).toMatchObject({
      message: 'Invalid querystring: limit: expected a number, got "abc"',
      issues: [{ path: 'limit', message: 'expected a number, got "abc"' }],
    });
  });
});
