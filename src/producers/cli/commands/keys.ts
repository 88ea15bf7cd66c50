import type { Command } from 'commander';
import { TenantId } from '../../../shared/domain/session.js';
import { parseOrThrow } from '../../../shared/errors.js';
import type { OrqClient } from '../../client.js';
import { configOption } from '../options.js';

// Loaded when a command runs: `--help` and a usage error need no client.
const common = () => import('../common.js');
const store = async (client: OrqClient) => {
  const { ApiKeyStore } = await import('../../../shared/store/api-keys.js');
  return new ApiKeyStore(client.store.redis, client.store.prefix);
};

/** `orq keys create|list|revoke`: tenants' API keys for the HTTP API (issue 41). */
export function registerKeysCommands(program: Command): void {
  const keys = program
    .command('keys')
    .description("Tenants' API keys for the HTTP API: each reaches its tenant's sessions only");

  keys
    .command('create')
    .description('Create a key for a tenant; it is printed once, and Redis keeps only its hash')
    .argument('<tenant>')
    .option('--label <text>', 'what the key is for, shown by `orq keys list`')
    .option(
      '--may-answer',
      "let it approve, edit and reject its tenant's plans and answer their questions (the answer right)",
    )
    .option(...configOption)
    .action(
      async (tenant: string, options: { label?: string; mayAnswer?: boolean; config?: string }) => {
        parseOrThrow(TenantId, tenant, 'tenant');
        await (
          await common()
        ).withClient(options, async (client) => {
          const { key, record } = await (
            await store(client)
          ).create(tenant, options.label, options.mayAnswer ? ['answer'] : []);
          process.stdout.write(`${key}\n`);
          process.stderr.write(
            `orq: key ${record.id} for tenant ${record.tenant}; it is not shown again\n`,
          );
        });
      },
    );

  keys
    .command('list')
    .description('List the keys: id, tenant, created, label (never the keys themselves)')
    .option('--json', 'print JSON')
    .option(...configOption)
    .action(async (options: { json?: boolean; config?: string }) => {
      await (
        await common()
      ).withClient(options, async (client) => {
        const records = await (await store(client)).list();
        if (options.json) {
          process.stdout.write(`${JSON.stringify(records, null, 2)}\n`);
          return;
        }
        for (const r of records) {
          process.stdout.write(
            `${r.id}  ${r.tenant}  ${r.createdAt}${r.rights.length ? `  [${r.rights.join(',')}]` : ''}${r.label ? `  ${r.label}` : ''}\n`,
          );
        }
        if (records.length === 0) process.stderr.write('orq: no API keys\n');
      });
    });

  keys
    .command('revoke')
    .description('Revoke a key by its id: it stops working at once')
    .argument('<id>')
    .option(...configOption)
    .action(async (id: string, options: { config?: string }) => {
      await (
        await common()
      ).withClient(options, async (client) => {
        const record = await (await store(client)).revoke(id);
        process.stdout.write(`revoked ${record.id} (tenant ${record.tenant})\n`);
      });
    });
}
