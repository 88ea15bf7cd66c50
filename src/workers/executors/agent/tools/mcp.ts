import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js';
import type { McpServerConfig } from '../../../../shared/config/schema.js';
import { loadOnce } from '../../../../shared/load-once.js';
import { providerKey } from '../../../../shared/config/provider-keys.js';
import type { Logger } from '../../../../shared/logger.js';
import { TailBuffer } from '../../process.js';
import type { Tool, ToolOutcome } from './types.js';

export interface McpToolsOptions {
  /** Working folder of stdio servers: the task's workspace. */
  cwd: string;
  timeoutMs: number;
  maxOutputBytes: number;
  logger: Logger;
}

export interface McpTools {
  tools: Tool[];
  /** Servers that could not be reached, as lines for the run's log. */
  problems: string[];
  close(): Promise<void>;
}

const MAX_TOOL_PAGES = 20;

// The SDK loads when a run first connects to a server, not with every worker.
const loadSdk = loadOnce(async () => {
  const [client, stdio, http] = await Promise.all([
    import('@modelcontextprotocol/sdk/client/index.js'),
    import('@modelcontextprotocol/sdk/client/stdio.js'),
    import('@modelcontextprotocol/sdk/client/streamableHttp.js'),
  ]);
  return { ...client, ...stdio, ...http };
});
type McpSdk = Awaited<ReturnType<typeof loadSdk>>;

/** `<server>__<tool>`: the characters function-calling APIs accept, at most 64 of them. */
export function mcpToolName(server: string, tool: string): string {
  return `${server}__${tool.replace(/[^A-Za-z0-9_-]/g, '_')}`.slice(0, 64);
}

interface ContentPart {
  type: string;
  text?: string;
  mimeType?: string;
  uri?: string;
  resource?: { uri?: string; text?: string };
}

/** The text of a tool result for the model; non-text parts are named, not inlined. */
function resultText(result: Record<string, unknown>): string {
  if (!('content' in result) && 'toolResult' in result) return JSON.stringify(result.toolResult);
  const parts = Array.isArray(result.content) ? (result.content as ContentPart[]) : [];
  const lines = parts.map((part) => {
    if (part.type === 'text') return part.text ?? '';
    if (part.type === 'resource')
      return part.resource?.text ?? `[resource ${part.resource?.uri ?? ''}]`;
    if (part.type === 'resource_link') return `[resource ${part.uri ?? ''}]`;
    return `[${part.type}${part.mimeType ? ` ${part.mimeType}` : ''}]`;
  });
  if (lines.length === 0 && result.structuredContent !== undefined) {
    lines.push(JSON.stringify(result.structuredContent));
  }
  return lines.join('\n');
}

function cap(text: string, maxBytes: number): string {
  const bytes = Buffer.byteLength(text);
  if (bytes <= maxBytes) return text;
  return `${Buffer.from(text).subarray(0, maxBytes).toString('utf8')}\n[... ${bytes - maxBytes} more bytes cut off ...]`;
}

/**
 * The values a server's envFromPod or headersFromEnv names, read from the pod's environment now
 * (issue 41): the session in Redis holds the names only. Read as provider keys are
 * (provider-keys.ts): a key the pod took out of its environment is still found, and
 * `<variable>_FILE` names a file holding the value. A variable the pod lacks stops that server
 * (the run reports it and goes on without it), rather than starting it without its key.
 */
export function valuesFromPod(
  server: string,
  setting: 'envFromPod' | 'headersFromEnv',
  names: Readonly<Record<string, string>> | undefined,
  env: NodeJS.ProcessEnv = process.env,
): Record<string, string> {
  const values: Record<string, string> = {};
  for (const [key, variable] of Object.entries(names ?? {})) {
    const value = providerKey(variable, env);
    if (value === undefined) {
      throw new Error(
        `the pod has no environment variable ${variable} (mcpServers "${server}" ${setting}.${key}); set it on the worker pods`,
      );
    }
    values[key] = value;
  }
  return values;
}

function transportFor(
  sdk: McpSdk,
  server: McpServerConfig,
  options: McpToolsOptions,
  stderr: TailBuffer,
): Transport {
  if (server.transport === 'http') {
    return new sdk.StreamableHTTPClientTransport(new URL(server.url), {
      requestInit: {
        headers: {
          ...server.headers,
          ...valuesFromPod(server.name, 'headersFromEnv', server.headersFromEnv),
        },
      },
    });
  }
  const transport = new sdk.StdioClientTransport({
    command: server.command,
    args: server.args,
    // The SDK's safe default set (PATH, HOME...), not the pod's secrets, plus what is configured.
    env: {
      ...sdk.getDefaultEnvironment(),
      ...server.env,
      ...valuesFromPod(server.name, 'envFromPod', server.envFromPod),
    },
    cwd: options.cwd,
    stderr: 'pipe',
  });
  transport.stderr?.on('data', (chunk: Buffer) => stderr.push(chunk));
  return transport;
}

/** One connection to a server: its client, what broke it, and whether it is closed. */
interface McpConnection {
  client: Client;
  stderr: TailBuffer;
  /**
   * What broke the connection (a reply over the SDK's size limit, a crash): the SDK's own
   * errors for later calls only say "Connection closed" or "Not connected".
   */
  transportError(): string | undefined;
  closed(): boolean;
}

async function openConnection(
  sdk: McpSdk,
  server: McpServerConfig,
  options: McpToolsOptions,
): Promise<McpConnection> {
  const stderr = new TailBuffer(4096);
  const client = new sdk.Client({ name: 'orq-agent', version: '1.0.0' });
  let transportError: string | undefined;
  let closed = false;
  client.onerror = (error) => {
    transportError = error.message;
  };
  client.onclose = () => {
    closed = true;
  };
  try {
    await client.connect(transportFor(sdk, server, options, stderr), {
      timeout: options.timeoutMs,
    });
  } catch (error) {
    await client.close().catch(() => undefined);
    const detail = stderr.toString().trim();
    throw new Error(`${(error as Error).message}${detail ? ` (stderr: ${detail})` : ''}`);
  }
  return { client, stderr, transportError: () => transportError, closed: () => closed };
}

async function connectOne(
  server: McpServerConfig,
  options: McpToolsOptions,
): Promise<{ tools: Tool[]; close(): Promise<void> }> {
  const sdk = await loadSdk();
  let connection = await openConnection(sdk, server, options);
  // A server that died is started again for the next call, not for the call it failed: that
  // call may have done its work before the server went, and the model decides whether to repeat it.
  let reopening: Promise<McpConnection> | undefined;
  const current = async (): Promise<McpConnection> => {
    if (!connection.closed()) return connection;
    reopening ??= openConnection(sdk, server, options).finally(() => {
      reopening = undefined;
    });
    try {
      connection = await reopening;
    } catch (error) {
      throw new Error(
        `MCP server "${server.name}" is down and could not be started again: ${(error as Error).message}`,
      );
    }
    options.logger.info({ server: server.name }, 'MCP server connected again');
    return connection;
  };
  try {
    const listed: { name: string; description?: string; inputSchema: Record<string, unknown> }[] =
      [];
    let cursor: string | undefined;
    for (let page = 0; page < MAX_TOOL_PAGES; page++) {
      const reply = await connection.client.listTools(cursor ? { cursor } : {}, {
        timeout: options.timeoutMs,
      });
      listed.push(...reply.tools);
      cursor = reply.nextCursor;
      if (!cursor) break;
    }
    const tools = listed.map((tool): Tool => ({
      extension: true,
      spec: {
        name: mcpToolName(server.name, tool.name),
        description: `${tool.description ?? tool.name} (MCP server ${server.name})`,
        inputSchema: tool.inputSchema,
      },
      async call(input, signal): Promise<ToolOutcome> {
        const used = await current();
        let result: Awaited<ReturnType<Client['callTool']>>;
        try {
          result = await used.client.callTool(
            { name: tool.name, arguments: (input ?? {}) as Record<string, unknown> },
            undefined,
            { signal, timeout: options.timeoutMs },
          );
        } catch (error) {
          const transportError = used.transportError();
          const stderr = used.stderr.toString().trim();
          const why = [
            transportError && `cause: ${transportError}`,
            stderr && `stderr: ${stderr.slice(-1000)}`,
          ].filter(Boolean);
          const again = used.closed() ? '; the server is started again for the next call' : '';
          throw new Error(
            `MCP server "${server.name}": ${(error as Error).message}${why.length ? ` (${why.join('; ')})` : ''}${again}`,
          );
        }
        const text = cap(resultText(result as Record<string, unknown>), options.maxOutputBytes);
        return result.isError
          ? { ok: false, error: text || 'the tool reported an error' }
          : { ok: true, output: text };
      },
    }));
    return { tools, close: () => connection.client.close().catch(() => undefined) };
  } catch (error) {
    await connection.client.close().catch(() => undefined);
    const detail = connection.stderr.toString().trim();
    throw new Error(`${(error as Error).message}${detail ? ` (stderr: ${detail})` : ''}`);
  }
}

/**
 * Connects to every configured MCP server through the official SDK and lists its tools. A
 * server that cannot be reached is reported in `problems` and the run goes on without it: a
 * missing tool is something the model can work around, not a reason to crash the worker.
 */
export async function connectMcpServers(
  servers: readonly McpServerConfig[],
  options: McpToolsOptions,
): Promise<McpTools> {
  const results = await Promise.allSettled(servers.map((server) => connectOne(server, options)));
  const connections: { close(): Promise<void> }[] = [];
  const tools: Tool[] = [];
  const problems: string[] = [];
  results.forEach((result, i) => {
    const name = servers[i]?.name ?? '?';
    if (result.status === 'fulfilled') {
      connections.push(result.value);
      tools.push(...result.value.tools);
    } else {
      const message =
        result.reason instanceof Error ? result.reason.message : String(result.reason);
      problems.push(`MCP server "${name}" is unavailable: ${message}`);
      options.logger.warn({ server: name, err: message }, 'MCP server unavailable');
    }
  });
  return {
    tools,
    problems,
    async close() {
      await Promise.all(connections.map((c) => c.close()));
    },
  };
}
