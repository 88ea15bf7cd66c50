import { inToolSpan } from '../../../llm/genai.js';
import { failSpan } from '../../../../shared/tracing/trace.js';
import { ToolError, type Tool, type ToolOutcome, type ToolSpec } from './types.js';

/**
 * Time a tool gets past the time limit before the toolbox gives up on it: run_command ends its
 * own process at the limit and awaits its output a second more, and should tell that itself.
 */
const TOOL_GRACE_MS = 2_000;

export interface ToolboxOptions {
  /**
   * Longest a tool call may take (execution.toolTimeoutSeconds): past it (plus a short grace),
   * the call is abandoned with an error observation whatever the tool is blocked on, and its
   * signal is aborted. No limit when unset.
   */
  timeoutMs?: number;
  /** Time past timeoutMs before the call is abandoned (default TOOL_GRACE_MS). */
  graceMs?: number;
}

/** The tools of one run, by name; calling one never throws. */
export class Toolbox {
  private readonly byName = new Map<string, Tool>();

  constructor(
    tools: readonly Tool[],
    private readonly options: ToolboxOptions = {},
  ) {
    // First one wins: built-in workspace tools cannot be shadowed by an MCP server's.
    for (const tool of tools)
      if (!this.byName.has(tool.spec.name)) this.byName.set(tool.spec.name, tool);
  }

  get specs(): ToolSpec[] {
    return [...this.byName.values()].map((t) => t.spec);
  }

  /**
   * Runs a tool and returns its observation. An unknown tool, bad input, a refused path or an
   * exception inside the tool all become `{ ok: false, error }` for the model to reflect on;
   * only a cancellation of the whole run propagates.
   */
  async call(name: string, input: unknown, signal: AbortSignal): Promise<ToolOutcome> {
    const tool = this.byName.get(name);
    if (!tool) {
      return {
        ok: false,
        error: `unknown tool "${name}"; available: ${[...this.byName.keys()].join(', ')}`,
      };
    }
    signal.throwIfAborted();
    return inToolSpan(
      { name, type: tool.extension ? 'extension' : 'function', arguments: input },
      async (span) => {
        try {
          const outcome = await this.within(name, tool, input, signal);
          if (!outcome.ok) failSpan(span, new ToolError(outcome.error));
          return outcome;
        } catch (error) {
          failSpan(span, error);
          throw error;
        }
      },
    );
  }

  /**
   * Runs `tool` within the time limit and the run's cancellation: a cancellation of the run
   * propagates, anything else becomes `{ ok: false, error }`.
   */
  private async within(
    name: string,
    tool: Tool,
    input: unknown,
    signal: AbortSignal,
  ): Promise<ToolOutcome> {
    // The tool's own signal ends with the run's, or at the time limit; the race below holds
    // the limit and the cancellation even for a tool that never looks at its signal.
    const own = new AbortController();
    const limitMs =
      this.options.timeoutMs === undefined
        ? undefined
        : this.options.timeoutMs + (this.options.graceMs ?? TOOL_GRACE_MS);
    let timer: NodeJS.Timeout | undefined;
    let onAbort: (() => void) | undefined;
    const stopped = new Promise<'timeout' | 'aborted'>((resolve) => {
      if (limitMs !== undefined) timer = setTimeout(() => resolve('timeout'), limitMs);
      onAbort = () => resolve('aborted');
      signal.addEventListener('abort', onAbort, { once: true });
    });
    const running = tool.call(input, own.signal).then(
      (outcome) => ({ outcome }),
      (error: unknown) => ({ error }),
    );
    try {
      const first = await Promise.race([running, stopped]);
      if (first === 'aborted') {
        own.abort(signal.reason);
        signal.throwIfAborted();
      }
      if (first === 'timeout') {
        own.abort(new Error('tool time limit'));
        return {
          ok: false,
          error: `${name} did not finish within ${Math.round((this.options.timeoutMs ?? 0) / 1000)}s (execution.toolTimeoutSeconds) and was abandoned`,
        };
      }
      if (typeof first === 'object' && 'outcome' in first) return first.outcome;
      const error = typeof first === 'object' ? first.error : undefined;
      signal.throwIfAborted();
      return { ok: false, error: error instanceof Error ? error.message : String(error) };
    } finally {
      if (timer) clearTimeout(timer);
      if (onAbort) signal.removeEventListener('abort', onAbort);
    }
  }
}
