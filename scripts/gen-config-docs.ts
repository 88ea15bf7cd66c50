/**
 * Regenerates the configuration reference in docs/configuration.md (between the
 * config-reference markers) and the JSON Schema shipped in schema/, both from the zod schema.
 * Run: `npm run docs:config`.
 */
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { format, resolveConfig } from 'prettier';
import {
  CONFIG_REFERENCE_FILE,
  CONFIG_SCHEMA_FILE,
  configJsonSchema,
  configReferenceMarkdown,
} from '../src/shared/config/json-schema.js';

const START = '<!-- config-reference:start -->';
const END = '<!-- config-reference:end -->';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');

async function formatted(path: string, text: string): Promise<string> {
  const options = await resolveConfig(path);
  return format(text, { ...options, filepath: path });
}

const referencePath = resolve(root, CONFIG_REFERENCE_FILE);
const reference = readFileSync(referencePath, 'utf8');
const start = reference.indexOf(START);
const end = reference.indexOf(END);
if (start === -1 || end < start) {
  throw new Error(`${CONFIG_REFERENCE_FILE} must contain ${START} followed by ${END}`);
}
const section = `${START}\n\n${configReferenceMarkdown()}\n\n`;
const next = await formatted(
  referencePath,
  reference.slice(0, start) + section + reference.slice(end),
);
writeFileSync(referencePath, next);
console.log(`updated ${referencePath}`);

const schemaPath = resolve(root, CONFIG_SCHEMA_FILE);
mkdirSync(dirname(schemaPath), { recursive: true });
writeFileSync(schemaPath, `${JSON.stringify(configJsonSchema(), null, 2)}\n`);
console.log(`wrote ${schemaPath}`);
