/**
 * Regenerates the configuration reference in README.md (between the config-reference markers)
 * and the JSON Schema shipped in schema/, both from the zod schema. Run: `npm run docs:config`.
 */
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { format, resolveConfig } from 'prettier';
import {
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

const readmePath = resolve(root, 'README.md');
const readme = readFileSync(readmePath, 'utf8');
const start = readme.indexOf(START);
const end = readme.indexOf(END);
if (start === -1 || end < start) {
  throw new Error(`README.md must contain ${START} followed by ${END}`);
}
const section = `${START}\n\n${configReferenceMarkdown()}\n\n`;
const next = await formatted(readmePath, readme.slice(0, start) + section + readme.slice(end));
writeFileSync(readmePath, next);
console.log(`updated ${readmePath}`);

const schemaPath = resolve(root, CONFIG_SCHEMA_FILE);
mkdirSync(dirname(schemaPath), { recursive: true });
writeFileSync(schemaPath, `${JSON.stringify(configJsonSchema(), null, 2)}\n`);
console.log(`wrote ${schemaPath}`);
