import { OrqError } from './errors.js';

/** Where a listener's address comes from, for the hint: the options that set it. */
export interface ListenSettings {
  host: string;
  port: number;
  /** How a user sets the port and the host, e.g. `--metrics-port`, `--metrics-host`. */
  portOption: string;
  hostOption: string;
}

/**
 * A listener that could not bind, as an error the user can act on (LISTEN_FAILED); any other
 * error is returned as it is. Node's own error is a stack trace naming neither the option nor
 * what to do.
 */
export function listenError(error: unknown, at: ListenSettings): unknown {
  const code = (error as NodeJS.ErrnoException | undefined)?.code;
  const details = { host: at.host, port: at.port, code };
  if (code === 'EADDRINUSE') {
    return new OrqError('LISTEN_FAILED', `Port ${at.port} on ${at.host} is already in use`, {
      hint: `Stop the process that listens there, or choose another port with ${at.portOption}`,
      details,
      cause: error,
    });
  }
  if (code === 'EACCES') {
    return new OrqError('LISTEN_FAILED', `No permission to listen on ${at.host}:${at.port}`, {
      hint: `Ports below 1024 need privileges: choose another port with ${at.portOption}`,
      details,
      cause: error,
    });
  }
  if (code === 'EADDRNOTAVAIL' || code === 'ENOTFOUND' || code === 'EAI_AGAIN') {
    return new OrqError('LISTEN_FAILED', `${at.host} is not an address of this machine`, {
      hint: `Listen on 127.0.0.1, 0.0.0.0 or one of this machine's addresses with ${at.hostOption}`,
      details,
      cause: error,
    });
  }
  return error;
}
