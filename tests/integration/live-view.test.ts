import { randomUUID } from 'node:crypto';
import { Writable } from 'node:stream';
import { Terminal } from '@xterm/headless';
import { afterAll, describe, expect, inject, it } from 'vitest';
import { createClient } from '../../src/producers/client.js';
import { followSession } from '../../src/producers/cli/follow.js';
import { LogRelay } from '../../src/producers/cli/log-relay.js';
import { parseConfig } from '../../src/shared/config/load.js';
import { createLogger } from '../../src/shared/logger.js';
import { startRoles } from '../../src/workers/registry.js';
import { ALL_ROLES } from '../support/cluster.js';
import { scenarioDir } from '../support/scenarios.js';

const COLUMNS = 100;
const ROWS = 40;

/** A terminal's output stream: what is written is kept, to be replayed into a terminal emulator. */
class TerminalCapture extends Writable {
  readonly isTTY = true;
  readonly columns = COLUMNS;
  readonly rows = ROWS;
  private readonly chunks: Buffer[] = [];

  override _write(chunk: Buffer, _encoding: BufferEncoding, done: () => void): void {
    this.chunks.push(Buffer.from(chunk));
    done();
  }

  /** The screen and its scrollback once every byte is drawn, as logical lines (wraps joined). */
  async screen(): Promise<string[]> {
    // allowProposedApi: reading the buffer is still a proposed API of xterm's headless build.
    const term = new Terminal({
      cols: COLUMNS,
      rows: ROWS,
      scrollback: 10_000,
      allowProposedApi: true,
    });
    // A terminal's line discipline turns \n into \r\n; the emulator gets the bytes raw.
    const text = Buffer.concat(this.chunks).toString('utf8').replace(/\r?\n/g, '\r\n');
    await new Promise<void>((resolve) => term.write(text, resolve));
    const buffer = term.buffer.active;
    const lines: string[] = [];
    for (let i = 0; i < buffer.length; i += 1) {
      const line = buffer.getLine(i);
      const content = line?.translateToString(true) ?? '';
      if (line?.isWrapped && lines.length > 0) lines[lines.length - 1] += content;
      else lines.push(content);
    }
    term.dispose();
    return lines;
  }
}

const scenarios = scenarioDir();
afterAll(() => scenarios.cleanup());

describe('the live view of orq run', () => {
  it('writes the roles log lines above the frame, which stays whole', async () => {
    const url = inject('redisUrl');
    const config = parseConfig({
      redis: { prefix: `t${randomUUID().slice(0, 8)}` },
      queues: { backoffMs: 50 },
    });
    // t1's first execution throws: its job fails once (a warning), and its retry succeeds.
    const scenario = scenarios.write('live-view', {
      plans: [
        {
          summary: 'Two tasks',
          tasks: [
            { id: 't1', title: 'First', acceptance: 'done' },
            { id: 't2', title: 'Second', acceptance: 'done', dependencies: ['t1'] },
          ],
        },
      ],
      planJudgements: [{ score: 90, isAcceptable: true }],
      failures: [{ role: 'worker', times: 1, taskId: 't1' }],
      latencyMs: 20,
    });
    // One screen: the frame (stdout) and the log lines (stderr) go to the same terminal.
    const screen = new TerminalCapture();
    const logs = new LogRelay(screen);
    const pod = await startRoles({
      roles: ALL_ROLES,
      connection: url,
      config,
      logger: createLogger({ level: 'warn', destination: logs }),
    });
    const client = await createClient({ connection: url, config });
    try {
      const { id } = await client.submit({
        instruction: 'Do two things',
        config: { llm: { scenario } },
      });
      const view = await followSession(client, id, {
        mode: 'live',
        out: screen,
        redrawMs: 5,
        logs,
      });
      expect(view.session.state).toBe('COMPLETED');

      const lines = await screen.screen();
      // The warning of t1's failed try, whole (a redraw under it would have erased it).
      const warnings = lines
        .filter((line) => line.startsWith('{'))
        .map((line) => JSON.parse(line) as Record<string, unknown>);
      expect(warnings).toEqual([
        expect.objectContaining({ msg: 'job failed', role: 'worker', taskId: 't1', sessionId: id }),
      ]);
      // One frame, the last one, after the warning: no piece of an earlier frame is left.
      const headers = lines.filter((line) => line.startsWith(`session ${id}`));
      expect(headers).toEqual([`session ${id}  COMPLETED`]);
      expect(lines.findIndex((line) => line.startsWith('{'))).toBeLessThan(
        lines.indexOf(headers[0] ?? ''),
      );
    } finally {
      await client.close();
      await pod.close(5_000);
    }
  });
});
