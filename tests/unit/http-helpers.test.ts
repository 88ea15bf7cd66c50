import { describe, expect, it } from 'vitest';
import {
  assertSafeToListen,
  bearerToken,
  boardCookieValue,
  cookieRole,
  isLoopbackHost,
  readCookie,
  secretsEqual,
} from '../../src/producers/http/auth.js';
import { boardDecision } from '../../src/producers/http/board-guard.js';
import { wantsJsonl } from '../../src/producers/http/routes/sessions.js';
import { formatSseEvent, parseSseStream } from '../../src/producers/http/sse.js';

describe('HTTP auth helpers', () => {
  it('knows loopback addresses from the others', () => {
    for (const host of [
      '127.0.0.1',
      '127.1.2.3',
      '::1',
      '[::1]',
      'localhost',
      '::ffff:127.0.0.1',
    ]) {
      expect(isLoopbackHost(host), host).toBe(true);
    }
    for (const host of ['0.0.0.0', '::', '10.0.0.5', '192.168.1.2', 'example.com', '128.0.0.1']) {
      expect(isLoopbackHost(host), host).toBe(false);
    }
  });

  it('refuses a non-loopback host only when there is no token', () => {
    expect(() => assertSafeToListen('0.0.0.0', undefined)).toThrow(/ORQ_API_TOKEN/);
    expect(() => assertSafeToListen('0.0.0.0', 'a'.repeat(16))).not.toThrow();
    expect(() => assertSafeToListen('127.0.0.1', undefined)).not.toThrow();
  });

  it('refuses a token shorter than 16 characters, on any address', () => {
    for (const host of ['0.0.0.0', '127.0.0.1']) {
      expect(() => assertSafeToListen(host, 'a'.repeat(15))).toThrow(
        /has 15 characters; at least 16 are needed/,
      );
    }
  });

  it('compares secrets of any length', () => {
    expect(secretsEqual('abc', 'abc')).toBe(true);
    expect(secretsEqual('abc', 'abd')).toBe(false);
    expect(secretsEqual('abc', 'abcdef')).toBe(false);
    expect(secretsEqual('', 'abc')).toBe(false);
  });

  it('reads the bearer token and the board cookie', () => {
    expect(bearerToken('Bearer  tok ')).toBe('tok');
    expect(bearerToken('bearer tok')).toBe('tok');
    expect(bearerToken('Basic dXNlcg==')).toBeUndefined();
    expect(readCookie('a=1; orq_board=x%3Dy; b=2', 'orq_board')).toBe('x=y');
    expect(readCookie('a=1', 'orq_board')).toBeUndefined();
    // Not valid percent-encoding: no cookie (a 401), not a thrown URIError (a 500).
    expect(readCookie('orq_board=%E0%A4%A', 'orq_board')).toBeUndefined();
    expect(boardCookieValue('t1')).not.toBe(boardCookieValue('t2'));
    expect(boardCookieValue('t1')).not.toContain('t1');
  });
});

describe('board cookies and actions (issue 41)', () => {
  const credentials = { token: 'a'.repeat(20), operatorToken: 'b'.repeat(20) };

  it('proves a role until its expiry, and only with the right token', () => {
    const now = 1_000_000;
    const operator = boardCookieValue(credentials.operatorToken, 'operator', now + 10);
    expect(cookieRole(operator, credentials, now)).toBe('operator');
    expect(cookieRole(operator, credentials, now + 10)).toBeUndefined();
    expect(cookieRole(operator, { token: credentials.token }, now)).toBeUndefined();
    const api = boardCookieValue(credentials.token, 'api', now + 10);
    expect(cookieRole(api, credentials, now)).toBe('api');
    expect(cookieRole(api.replace(/^api\./, 'operator.'), credentials, now)).toBeUndefined();
    expect(cookieRole(api.replace(/\.\d+\./, `.${now + 99}.`), credentials, now)).toBeUndefined();
  });

  it('refuses operators a second token equal to the API one', () => {
    expect(() => assertSafeToListen('127.0.0.1', 'c'.repeat(16), 'c'.repeat(16))).toThrow(
      /ORQ_OPERATOR_TOKEN is the same/,
    );
    expect(() => assertSafeToListen('0.0.0.0', undefined, 'c'.repeat(15))).toThrow(
      /ORQ_OPERATOR_TOKEN\) has 15 characters/,
    );
  });

  it('lets anyone read, the operator retry and clean, nobody add or rewrite', () => {
    const open = { readOnly: false, operatorConfigured: true };
    const base = '/admin/queues/api/queues/:queueName';
    expect(boardDecision('GET', `${base}/:jobId`, 'api', open).allowed).toBe(true);
    expect(boardDecision('HEAD', '/admin/queues/api/queues', 'api', open).allowed).toBe(true);
    expect(boardDecision('PUT', `${base}/retry/:queueStatus`, 'operator', open).allowed).toBe(true);
    expect(boardDecision('PUT', `${base}/:jobId/clean`, 'operator', open).allowed).toBe(true);
    expect(boardDecision('PUT', `${base}/retry/:queueStatus`, 'api', open).allowed).toBe(false);
    expect(
      boardDecision('PUT', `${base}/retry/:queueStatus`, 'operator', { ...open, readOnly: true })
        .allowed,
    ).toBe(false);
    for (const [method, route] of [
      ['POST', `${base}/add`],
      ['PATCH', `${base}/:jobId/update-data`],
      ['PUT', `${base}/obliterate`],
      ['PUT', `${base}/empty`],
      ['PUT', `${base}/rate-limit`],
      ['PUT', '/admin/queues/api/queues/pause'],
      ['PUT', `${base}/:jobId/remove-unprocessed-children`],
      ['PUT', `${base}/:jobId/promote`],
      ['POST', `${base}/retry/:queueStatus`],
      // A read route not on the list (one a later Bull Board might add) is refused too.
      ['GET', `${base}/secrets`],
    ] as const) {
      expect(boardDecision(method, route, 'operator', open).allowed, `${method} ${route}`).toBe(
        false,
      );
    }
  });
});

describe('server-sent event framing', () => {
  it('round-trips ids, event names and multi-line data', () => {
    const text =
      formatSseEvent({ id: '1-0', data: '{"a":1}' }) +
      ': keep-alive\n\n' +
      formatSseEvent({ event: 'end', data: 'line one\nline two' });
    expect(parseSseStream(text)).toEqual([
      { id: '1-0', data: '{"a":1}' },
      { event: 'end', data: 'line one\nline two' },
    ]);
  });
});

describe('request helpers', () => {
  it('chooses JSONL by query first, then by Accept', () => {
    expect(wantsJsonl('jsonl', undefined)).toBe(true);
    expect(wantsJsonl('json', 'application/x-ndjson')).toBe(false);
    expect(wantsJsonl(undefined, 'text/html, application/x-ndjson;q=0.9')).toBe(true);
    expect(wantsJsonl(undefined, 'application/json')).toBe(false);
  });
});
