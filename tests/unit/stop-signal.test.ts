import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { exited } from '../support/pods.js';

const FIXTURE = fileURLToPath(new URL('../fixtures/stop-after-lockfile.ts', import.meta.url));

describe("orq start's stop signal", () => {
  it('stops the process by its own hand, exit 0, with signal-exit loaded too', async () => {
    const child = spawn(process.execPath, ['--import', 'tsx', FIXTURE], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let output = '';
    await new Promise<void>((resolve) =>
      child.stdout.on('data', (chunk: Buffer) => {
        output += chunk.toString();
        if (output.includes('ready')) resolve();
      }),
    );
    child.kill('SIGTERM');
    expect(await exited(child)).toBe(0);
    expect(output).toContain('stopped by SIGTERM');
  }, 30_000);
});
