import { describe, expect, it } from 'vitest';
import { OrqError } from '../../src/shared/errors.js';
import { listenError } from '../../src/shared/listen-error.js';

const at = {
  host: '127.0.0.1',
  port: 9464,
  portOption: '--metrics-port',
  hostOption: '--metrics-host',
};
const failure = (code: string) => Object.assign(new Error(`listen ${code}`), { code });

describe('listenError (a listener that could not bind)', () => {
  it.each([
    ['EADDRINUSE', 'Port 9464 on 127.0.0.1 is already in use', '--metrics-port'],
    ['EACCES', 'No permission to listen on 127.0.0.1:9464', '--metrics-port'],
    ['EADDRNOTAVAIL', '127.0.0.1 is not an address of this machine', '--metrics-host'],
    ['ENOTFOUND', '127.0.0.1 is not an address of this machine', '--metrics-host'],
  ])('%s becomes LISTEN_FAILED, naming the option to change', (code, message, option) => {
    const cause = failure(code);
    const error = listenError(cause, at);
    expect(error).toBeInstanceOf(OrqError);
    expect((error as OrqError).code).toBe('LISTEN_FAILED');
    expect((error as OrqError).message).toContain(message);
    expect((error as OrqError).hint).toContain(option);
    expect((error as OrqError).cause).toBe(cause);
  });

  it('leaves any other error as it is', () => {
    const other = failure('ECONNRESET');
    expect(listenError(other, at)).toBe(other);
    expect(listenError('not an error', at)).toBe('not an error');
  });
});
