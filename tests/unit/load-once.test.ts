import { describe, expect, it } from 'vitest';
import { loadOnce } from '../../src/shared/load-once.js';

describe('loadOnce', () => {
  it('loads on first use only, and every caller shares that load', async () => {
    let loads = 0;
    const load = loadOnce(async () => ({ n: ++loads }));
    expect(loads).toBe(0);
    const [a, b] = await Promise.all([load(), load()]);
    expect(await load()).toBe(a);
    expect(b).toBe(a);
    expect(loads).toBe(1);
  });

  it('forgets a failed load, so the next use tries again', async () => {
    let loads = 0;
    const load = loadOnce(async () => {
      loads += 1;
      if (loads === 1) throw new Error('not yet');
      return 'ready';
    });
    await expect(load()).rejects.toThrow('not yet');
    await expect(load()).resolves.toBe('ready');
    expect(loads).toBe(2);
  });
});
