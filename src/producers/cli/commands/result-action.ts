import { printJson, withSessions } from '../common.js';
import { resultNotices } from '../result-text.js';
import { ExitCode } from '../run-cli.js';

export interface ResultOptions {
  config?: string;
  json?: boolean;
  partial?: boolean;
}

/**
 * `orq result`: the result's text on stdout (its notes on stderr), or the whole result as JSON.
 * Exits 1 when the result is not complete, as a followed session that did not complete does.
 */
export function result(sessionId: string, options: ResultOptions): Promise<void> {
  return withSessions(options, async (client) => {
    const found = await client.result(sessionId, { partial: options.partial ?? false });
    if (options.json) {
      printJson(found);
    } else {
      process.stderr.write(resultNotices(found));
      if (found.text !== '') process.stdout.write(`${found.text.trimEnd()}\n`);
    }
    if (!found.complete) process.exitCode = ExitCode.NOT_COMPLETED;
  });
}
