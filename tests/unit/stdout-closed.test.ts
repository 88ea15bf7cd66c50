import { describe, expect, it } from 'vitest';
import { createStdoutGuard } from '../../src/producers/cli/stdout-closed.js';

const epipe = () => Object.assign(new Error('write EPIPE'), { code: 'EPIPE' });

describe('a closed stdout', () => {
  it('ends a command that holds nothing with exit code 0, once', () => {
    const exits: number[] = [];
    const guard = createStdoutGuard((code) => exits.push(code));
    guard.handleError(epipe());
    guard.handleError(epipe());
    expect(exits).toEqual([0]);
  });

  it('stops a command that holds stdout instead, even when its stopper came after the error', () => {
    const exits: number[] = [];
    const guard = createStdoutGuard((code) => exits.push(code));
    const release = guard.hold();
    guard.handleError(epipe());
    // The roles start later: they stop at once.
    let stopped = 0;
    guard.onClosed(() => (stopped += 1));
    expect(stopped).toBe(1);
    release();
    expect(exits).toEqual([]);
  });

  it('does not exit during a shutdown whose stopper is gone (the last write failed late)', () => {
    const exits: number[] = [];
    const guard = createStdoutGuard((code) => exits.push(code));
    const release = guard.hold();
    let stopped = 0;
    const undo = guard.onClosed(() => (stopped += 1));
    undo();
    guard.handleError(epipe());
    expect(stopped).toBe(0);
    expect(exits).toEqual([]);
    release();
  });

  it('throws any other error', () => {
    const guard = createStdoutGuard(() => undefined);
    const other = Object.assign(new Error('boom'), { code: 'EIO' });
    expect(() => guard.handleError(other)).toThrow('boom');
  });
});
