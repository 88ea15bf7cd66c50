import { describe, expect, it } from 'vitest';
import {
  assertSafeToListen,
  bearerToken,
  boardCookieValue,
  isLoopbackHost,
  readCookie,
  secretsEqual,
} from '../../src/producers/http/auth.js';
import { issuesFromSchemaValidation } from '../../src/producers/http/errors.js';
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
    expect(boardCookieValue('t1')).not.toBe(boardCookieValue('t2'));
    expect(boardCookieValue('t1')).not.toContain('t1');
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
  it('names the field of a schema validation issue, and unknown keys in full', () => {
    expect(
      issuesFromSchemaValidation([
        { instancePath: '/instruction', message: 'too short', keyword: 'too_small', params: {} },
        {
          instancePath: '/config',
          message: 'x',
          keyword: 'unrecognized_keys',
          params: { keys: ['foo'] },
        },
        { instancePath: '', message: 'bad', keyword: 'custom', params: {} },
      ]),
    ).toEqual([
      { path: 'instruction', message: 'too short' },
      { path: 'config', message: 'unknown key "config.foo"' },
      { path: '(root)', message: 'bad' },
    ]);
  });

  it('chooses JSONL by query first, then by Accept', () => {
    expect(wantsJsonl('jsonl', undefined)).toBe(true);
    expect(wantsJsonl('json', 'application/x-ndjson')).toBe(false);
    expect(wantsJsonl(undefined, 'text/html, application/x-ndjson;q=0.9')).toBe(true);
    expect(wantsJsonl(undefined, 'application/json')).toBe(false);
  });
});
