import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import type { Command } from 'commander';
import { stringify as toYaml } from 'yaml';
import { configJsonSchema } from '../../../shared/config/json-schema.js';
import { configWarnings, findConfigFile, loadConfig } from '../../../shared/config/load.js';
import type { OrqConfig } from '../../../shared/config/schema.js';
import { ConfigError, issueText, OrqError } from '../../../shared/errors.js';
import { ExitCode } from '../run-cli.js';

/** A password in `redis://user:secret@host` is shown as `***`, so `config show` can be pasted. */
function redactUrl(url: string): string {
  try {
    const parsed = new URL(url);
    if (parsed.password === '') return url;
    parsed.password = '***';
    return parsed.toString();
  } catch {
    return url;
  }
}

function forDisplay(config: OrqConfig): OrqConfig {
  if (config.redis.url === undefined) return config;
  return { ...config, redis: { ...config.redis, url: redactUrl(config.redis.url) } };
}

/** `orq config schema|check|show`. */
export function registerConfigCommands(program: Command): void {
  const config = program
    .command('config')
    .description('Configuration tools: JSON Schema, validation, effective values');

  config
    .command('schema')
    .description('Print the JSON Schema of the configuration file (generated from the zod schema)')
    .option('-o, --out <file>', 'write the schema to a file instead of stdout')
    .action((options: { out?: string }) => {
      const text = `${JSON.stringify(configJsonSchema(), null, 2)}\n`;
      if (options.out) {
        try {
          mkdirSync(dirname(options.out), { recursive: true });
          writeFileSync(options.out, text);
        } catch (error) {
          throw new OrqError(
            'VALIDATION_FAILED',
            `Cannot write the schema to ${options.out}: ${(error as Error).message}`,
            { hint: 'Give --out a file in a directory you can write to.', cause: error },
          );
        }
        process.stderr.write(`wrote ${options.out}\n`);
      } else {
        process.stdout.write(text);
      }
    });

  config
    .command('check')
    .description(
      'Validate a configuration file (with the environment overrides), as a run or submit of it would, and give advice',
    )
    .argument('<file>', 'configuration file (.yaml, .yml or .json)')
    .option('--no-env', 'ignore REDIS_URL, ORQ_PREFIX, ORQ_LOG_LEVEL and ORQ__* variables')
    .option('--strict', 'treat warnings as problems (exit code 1)')
    .action((file: string, options: { env: boolean; strict?: boolean }) => {
      let loaded: OrqConfig;
      try {
        // The session settings as a submit checks them: what `orq run --config FILE` refuses.
        loaded = loadConfig({ file, env: options.env ? process.env : {}, submitChecks: true });
      } catch (error) {
        if (!(error instanceof ConfigError)) throw error;
        for (const issue of error.issues) {
          process.stderr.write(`${file}: ${issueText(issue)}\n`);
        }
        process.stderr.write(`${file}: ${error.issues.length} error(s); ${error.hint ?? ''}\n`);
        process.exitCode = ExitCode.USAGE;
        return;
      }
      const warnings = configWarnings(loaded);
      // Under --strict a warning fails the check: "OK" before it would contradict the exit code.
      if (options.strict && warnings.length > 0) {
        for (const warning of warnings) process.stderr.write(`${file}: warning: ${warning}\n`);
        process.stderr.write(
          `${file}: valid, but ${warnings.length} warning(s) fail the check under --strict\n`,
        );
        process.exitCode = ExitCode.NOT_COMPLETED;
        return;
      }
      process.stdout.write(`${file}: OK\n`);
      for (const warning of warnings) process.stdout.write(`${file}: warning: ${warning}\n`);
    });

  config
    .command('show')
    .description(
      'Print the effective configuration (file, environment and defaults); without FILE, ' +
        'ORQ_CONFIG or ./orq.config.{yaml,yml,json}',
    )
    .argument('[file]', 'configuration file')
    .option('--json', 'print JSON instead of YAML')
    .action((file: string | undefined, options: { json?: boolean }) => {
      const source = findConfigFile({ file });
      const loaded = loadConfig({ file });
      const effective = forDisplay(loaded);
      for (const warning of configWarnings(loaded)) process.stderr.write(`warning: ${warning}\n`);
      if (options.json) {
        process.stdout.write(`${JSON.stringify(effective, null, 2)}\n`);
      } else {
        process.stdout.write(`# from ${source ?? 'defaults'} + environment\n`);
        process.stdout.write(toYaml(effective));
      }
    });
}
