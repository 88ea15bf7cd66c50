import type { SessionConfig } from '../../shared/config/schema.js';
import type { Session } from '../../shared/domain/session.js';
import { MODEL_ROLES } from '../../shared/config/roles.js';

/** What the API shows instead of a secret value. */
export const REDACTED = '[redacted]';

const hideValues = (values: Record<string, string>): Record<string, string> =>
  Object.fromEntries(Object.keys(values).map((name) => [name, REDACTED]));

/** A URL with its password (user:password@) hidden; anything unparsable is left alone. */
function hidePassword(url: string): string {
  try {
    const parsed = new URL(url);
    if (!parsed.password) return url;
    parsed.password = REDACTED;
    return parsed.toString();
  } catch {
    return url;
  }
}

/**
 * A session as the HTTP API shows it: the operator's secrets that travel in its config (MCP
 * servers' env and headers, passwords in URLs) hidden from whoever holds the API token. The
 * names stay, so a reader still sees which variables and headers are set.
 */
export function redactSession(session: Session): Session {
  const { execution, llm } = session.config;
  const withUrl = <T extends { baseUrl?: string | undefined }>(role: T): T =>
    role.baseUrl ? { ...role, baseUrl: hidePassword(role.baseUrl) } : role;
  const config: SessionConfig = {
    ...session.config,
    execution: {
      ...execution,
      mcpServers: execution.mcpServers.map((server) =>
        server.transport === 'stdio'
          ? { ...server, env: hideValues(server.env) }
          : { ...server, url: hidePassword(server.url), headers: hideValues(server.headers) },
      ),
    },
    llm: {
      ...llm,
      default: withUrl(llm.default),
      ...Object.fromEntries(
        MODEL_ROLES.flatMap((role) => {
          const own = llm[role];
          return own ? [[role, withUrl(own)]] : [];
        }),
      ),
    },
  };
  return { ...session, config };
}
