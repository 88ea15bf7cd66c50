/** What the model is told about a tool: its name, what it does, and its input as JSON Schema. */
export interface ToolSpec {
  name: string;
  description: string;
  inputSchema: Record<string, unknown>;
}

/** A tool call's observation for the model: an output, or an error it should reflect on. */
export type ToolOutcome = { ok: true; output: string } | { ok: false; error: string };

export interface Tool {
  spec: ToolSpec;
  /** An MCP server's tool (gen_ai.tool.type `extension` in traces); orq's own are functions. */
  extension?: boolean;
  call(input: unknown, signal: AbortSignal): Promise<ToolOutcome>;
}

/**
 * An error a tool reports on purpose (bad path, refused command). The toolbox turns it, and
 * any other error a tool throws, into an observation; it never ends the run.
 */
export class ToolError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ToolError';
  }
}
