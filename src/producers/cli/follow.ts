import { createLogUpdate } from 'log-update';
import type { HistoryEntry } from '../../shared/domain/history.js';
import type { SessionState } from '../../shared/domain/session.js';
import type { OrqClient, SessionView } from '../client.js';
import {
  clipToWidth,
  formatHistoryEntry,
  formatLiveView,
  formatOutcomeNotice,
  LIVE_HISTORY_LINES,
} from './format.js';
import type { LogRelay } from './log-relay.js';
import { onStdoutClosed } from './stdout-closed.js';
import { ExitCode } from './run-cli.js';

/**
 * live: a frame redrawn in place (a terminal); lines: one readable line per history entry;
 * jsonl: one history entry as JSON per line (for other programs).
 */
export type FollowMode = 'live' | 'lines' | 'jsonl';

export interface FollowOptions {
  mode: FollowMode;
  out: NodeJS.WritableStream & { rows?: number; columns?: number };
  /** Stops following early (Ctrl-C); the last frame is still drawn. */
  signal?: AbortSignal;
  /** Least time between two redraws of the live frame (ms). */
  redrawMs?: number;
  /** Follows the history after this entry id (a resumed session: what came after the resume). */
  after?: string;
  /** The log lines of roles running in this process: written above the live frame. */
  logs?: LogRelay;
  /** Where lines and jsonl modes say that Redis was lost and is back (default stderr). */
  notices?: NodeJS.WritableStream;
}

/** What following says while Redis is unreachable, and once it is back. */
export const connectionNotice = (change: { up: boolean; error?: string }): string =>
  change.up
    ? 'orq: Redis is back; following the session again'
    : `orq: lost Redis (${change.error ?? 'connection closed'}); waiting for it to come back (Ctrl-C to stop)`;

/**
 * The live frame in a terminal, plain lines otherwise, JSON lines when asked for. A terminal
 * that reports no size (a pty opened 0×0) gets lines too: log-update fits a frame to the
 * reported rows and columns, and would draw nothing in 0 rows.
 */
export function followMode(
  stream: { isTTY?: boolean; rows?: number; columns?: number },
  json: boolean | undefined,
): FollowMode {
  if (json) return 'jsonl';
  const sized = stream.rows !== 0 && stream.columns !== 0;
  return stream.isTTY && sized ? 'live' : 'lines';
}

/** How often the live frame is drawn again while a task runs, for its time. */
const TICK_MS = 1000;
/** How often the live view reads the session again while a task runs, for its progress. */
const PROGRESS_READ_MS = 3000;

/**
 * Follows a session until it finishes or blocks (or `signal` aborts) and returns its final view.
 * In live mode the session is re-read at most every `redrawMs` while history entries arrive.
 */
export async function followSession(
  client: OrqClient,
  sessionId: string,
  options: FollowOptions,
): Promise<SessionView> {
  // Set while Redis is unreachable: the live frame shows it as its last line.
  let outage: string | undefined;
  let onOutage = () => {};
  const entries = client.watch(sessionId, {
    until: 'settled',
    ...(options.signal ? { signal: options.signal } : {}),
    ...(options.after ? { after: options.after } : {}),
    onConnection: (change) => {
      if (options.mode !== 'live') {
        (options.notices ?? process.stderr).write(`${connectionNotice(change)}\n`);
        return;
      }
      outage = change.up ? undefined : connectionNotice(change).replace(/^orq: /, '');
      onOutage();
    },
  });
  if (options.mode !== 'live') {
    for await (const { entry } of entries) {
      const line = options.mode === 'jsonl' ? JSON.stringify(entry) : formatHistoryEntry(entry);
      options.out.write(`${line}\n`);
    }
    return client.get(sessionId);
  }

  const { out } = options;
  const render = createLogUpdate(out);
  const recent: HistoryEntry[] = [];
  let frame = '';
  let shown: SessionView | undefined;
  const draw = (view: SessionView, final = false) => {
    shown = view;
    const rows = out.rows === undefined ? undefined : out.rows - (outage ? 1 : 0);
    frame = formatLiveView(view, recent, { rows, columns: out.columns, final });
    if (outage) frame += `\n${clipToWidth(outage, Math.max((out.columns ?? 80) - 1, 20))}`;
    render(frame);
  };
  onOutage = () => {
    if (shown) draw(shown);
  };
  const releaseLogs = options.logs?.above({
    clear: () => render.clear(),
    redraw: () => {
      if (frame) render(frame);
    },
  });

  // Redraws are throttled and serialized: a burst of entries costs one read of the session.
  const redrawMs = options.redrawMs ?? 150;
  let timer: NodeJS.Timeout | undefined;
  let drawing: Promise<void> = Promise.resolve();
  let readAt = 0;
  const read = async () => {
    readAt = Date.now();
    return client.get(sessionId);
  };
  const scheduleRedraw = () => {
    if (timer) return;
    timer = setTimeout(() => {
      timer = undefined;
      drawing = drawing.then(async () => draw(await read())).catch(() => undefined);
    }, redrawMs);
  };
  // Running tasks' times go on between events: the frame is drawn again from the view it shows
  // (no read), so a long task is seen to be alive. What they report doing (an agent's output)
  // changes without a history entry, so it is read anew every PROGRESS_READ_MS.
  const ticker = setInterval(() => {
    if (!shown?.tasks.some((t) => t.startedAt && !t.endedAt)) return;
    if (Date.now() - readAt >= PROGRESS_READ_MS) scheduleRedraw();
    else draw(shown);
  }, TICK_MS);
  ticker.unref();

  try {
    draw(await read());
    for await (const { entry } of entries) {
      recent.push(entry);
      if (recent.length > LIVE_HISTORY_LINES) recent.shift();
      scheduleRedraw();
    }
    clearTimeout(timer);
    await drawing;
    const final = await client.get(sessionId);
    draw(final, true);
    return final;
  } finally {
    clearInterval(ticker);
    clearTimeout(timer);
    await drawing;
    // Keeps the last frame on screen and shows the cursor again, also after an error.
    render.done();
    releaseLogs?.();
  }
}

/** An AbortSignal that fires on Ctrl-C or SIGTERM while following; dispose() removes the hooks. */
export function stopOnSignals(): { signal: AbortSignal; interrupted(): boolean; dispose(): void } {
  const controller = new AbortController();
  const onSignal = () => controller.abort();
  // SIGHUP too (the terminal closed): the shutdown then also stops a private redis-server.
  const signals = ['SIGINT', 'SIGTERM', 'SIGHUP'] as const;
  for (const name of signals) process.once(name, onSignal);
  // `orq run … | head`: the reader went away, as good as a Ctrl-C.
  const undoStdout = onStdoutClosed(onSignal);
  return {
    signal: controller.signal,
    interrupted: () => controller.signal.aborted,
    dispose() {
      for (const name of signals) process.off(name, onSignal);
      undoStdout();
    },
  };
}

/** PLANNING, RUNNING or INTEGRATING: the session moves only while roles run, not when a person acts. */
export const waitsForRoles = (state: SessionState): boolean =>
  state === 'PLANNING' || state === 'RUNNING' || state === 'INTEGRATING';

/**
 * The exit code of a command that followed a session: 0 only when it COMPLETED; otherwise
 * what happened (blocked and how to resume, failed and why) is said on stderr.
 */
export function reportOutcome(
  view: SessionView,
  interrupted: boolean,
  options: { resumeHere?: boolean } = {},
): ExitCode {
  if (view.session.state === 'COMPLETED') return ExitCode.OK;
  if (interrupted) {
    const { id, state } = view.session;
    // The roles stopped with this command: the session waits for them, not for a person.
    if (options.resumeHere && waitsForRoles(state)) {
      process.stderr.write(
        `orq: interrupted: session ${id} is ${state} and waits for its roles. Run \`orq watch ${id} --run\` to go on with it here\n`,
      );
    }
    return ExitCode.INTERRUPTED;
  }
  const notice = formatOutcomeNotice(view, options);
  if (notice) process.stderr.write(`orq: ${notice}\n`);
  return ExitCode.NOT_COMPLETED;
}
