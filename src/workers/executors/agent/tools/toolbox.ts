import type { Tool, ToolOutcome, ToolSpec } from './types.js';

/** The tools of one run, by name; calling one never throws. */
export class Toolbox {
  private readonly byName = new Map<string, Tool>();

  constructor(tools: readonly Tool[]) {
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
    try {
      return await tool.call(input, signal);
    } catch (error) {
      signal.throwIfAborted();
      return { ok: false, error: error instanceof Error ? error.message : String(error) };
    }
  }
}
