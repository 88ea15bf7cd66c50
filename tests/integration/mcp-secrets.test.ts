import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { McpServerConfig } from '../../src/shared/config/schema.js';
import { takeProviderKeys } from '../../src/shared/config/provider-keys.js';
import { silentLogger } from '../../src/shared/logger.js';
import { connectMcpServers, valuesFromPod } from '../../src/workers/executors/agent/tools/mcp.js';

/** Issue 41: an MCP server's secrets named by the pod's environment, not kept in Redis. */

const MCP_SERVER = fileURLToPath(new URL('../fixtures/mcp-calc-server.mjs', import.meta.url));
const tmp = mkdtempSync(join(tmpdir(), 'orq-mcp-secrets-'));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

describe("MCP secrets from the pod's environment", () => {
  it('reads the named variables, and names a missing one', () => {
    const env = { ORQ_MCP_TOKEN: 's3cret' };
    expect(valuesFromPod('gh', 'envFromPod', { GITHUB_TOKEN: 'ORQ_MCP_TOKEN' }, env)).toEqual({
      GITHUB_TOKEN: 's3cret',
    });
    expect(() => valuesFromPod('gh', 'headersFromEnv', { Authorization: 'NOPE' }, env)).toThrow(
      'the pod has no environment variable NOPE (mcpServers "gh" headersFromEnv.Authorization); set it on the worker pods',
    );
  });

  it('reads a file its _FILE variable names, and a provider key the pod took at its start', () => {
    const file = join(tmp, 'token');
    writeFileSync(file, 'from-a-file\n');
    expect(
      valuesFromPod(
        'gh',
        'envFromPod',
        { GITHUB_TOKEN: 'ORQ_MCP_TOKEN' },
        {
          ORQ_MCP_TOKEN_FILE: file,
        },
      ),
    ).toEqual({ GITHUB_TOKEN: 'from-a-file' });
    process.env.ORQ_TEST_MCP_TAKEN_KEY = 'sk-taken';
    takeProviderKeys(['ORQ_TEST_MCP_TAKEN_KEY']);
    expect(valuesFromPod('gh', 'envFromPod', { KEY: 'ORQ_TEST_MCP_TAKEN_KEY' })).toEqual({
      KEY: 'sk-taken',
    });
  });

  it('keeps only the names in the session config', () => {
    const server = McpServerConfig.parse({
      name: 'calc',
      transport: 'stdio',
      command: process.execPath,
      envFromPod: { CALC_TOKEN: 'ORQ_TEST_MCP_SECRET' },
    });
    expect(JSON.stringify(server)).not.toContain('s3cret');
  });

  it('starts a server only when the pod has its variables', async () => {
    const server = McpServerConfig.parse({
      name: 'calc',
      transport: 'stdio',
      command: process.execPath,
      args: [MCP_SERVER],
      envFromPod: { CALC_TOKEN: 'ORQ_TEST_MCP_SECRET' },
    });
    const options = { cwd: tmp, timeoutMs: 10_000, maxOutputBytes: 65_536, logger: silentLogger };
    const without = await connectMcpServers([server], options);
    expect(without.tools).toEqual([]);
    expect(without.problems[0]).toContain('no environment variable ORQ_TEST_MCP_SECRET');
    await without.close();
    process.env.ORQ_TEST_MCP_SECRET = 's3cret';
    try {
      const withIt = await connectMcpServers([server], options);
      expect(withIt.problems).toEqual([]);
      expect(withIt.tools.map((t) => t.spec.name)).toContain('calc__add');
      await withIt.close();
    } finally {
      delete process.env.ORQ_TEST_MCP_SECRET;
    }
  });
});
