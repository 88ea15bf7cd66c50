import { z } from 'zod';
import { OrqConfig } from './schema.js';

/** Identifies the schema; a URN because the schema ships inside the package, not on a site. */
export const CONFIG_SCHEMA_ID = 'urn:orq:config';

/** Where `npm run docs:config` writes the schema, shipped with the package. */
export const CONFIG_SCHEMA_FILE = 'schema/orq.config.schema.json';
/** Where the configuration reference is kept (between its markers), from the project root. */
export const CONFIG_REFERENCE_FILE = 'docs/configuration.md';

/** The subset of JSON Schema that z.toJSONSchema emits for the config. */
interface JsonSchemaNode {
  type?: string;
  description?: string;
  default?: unknown;
  enum?: unknown[];
  const?: unknown;
  format?: string;
  pattern?: string;
  minimum?: number;
  maximum?: number;
  exclusiveMinimum?: number;
  exclusiveMaximum?: number;
  minLength?: number;
  maxLength?: number;
  items?: JsonSchemaNode;
  properties?: Record<string, JsonSchemaNode>;
  [key: string]: unknown;
}

/**
 * JSON Schema (draft 2020-12) of the configuration file, generated from the zod schema — never
 * written by hand (DESIGN.md). `io: 'input'` describes what a user may write: every key with a
 * default is optional.
 */
export function configJsonSchema(): Record<string, unknown> {
  const { $schema, ...generated } = z.toJSONSchema(OrqConfig, { io: 'input' });
  return {
    $schema,
    $id: CONFIG_SCHEMA_ID,
    title: 'orq configuration',
    description:
      'Configuration file of orq (orq.config.yaml, orq.config.yml or orq.config.json). ' +
      'Generated from src/shared/config/schema.ts.',
    ...generated,
  };
}

// ---------------------------------------------------------------------------------------------
// Markdown reference

interface ReferenceRow {
  key: string;
  node: JsonSchemaNode;
}

function isSection(node: JsonSchemaNode): boolean {
  return node.type === 'object' && node.properties !== undefined;
}

/**
 * Leaf keys by dotted path. Sibling sections with the same schema (the per-role LLM overrides)
 * are listed once as `llm.{planner,judge}.key` instead of repeating identical rows.
 */
function collectRows(node: JsonSchemaNode, prefix: string): ReferenceRow[] {
  const rows: ReferenceRow[] = [];
  const entries = Object.entries(node.properties ?? {});
  const done = new Set<string>();
  for (const [key, child] of entries) {
    if (done.has(key)) continue;
    if (!isSection(child)) {
      rows.push({ key: `${prefix}${key}`, node: child });
      continue;
    }
    const fingerprint = JSON.stringify(child);
    const twins = entries
      .filter(([, sibling]) => isSection(sibling) && JSON.stringify(sibling) === fingerprint)
      .map(([other]) => other);
    twins.forEach((twin) => done.add(twin));
    const name = twins.length > 1 ? `{${twins.join(',')}}` : key;
    rows.push(...collectRows(child, `${prefix}${name}.`));
  }
  return rows;
}

function code(value: string): string {
  return `\`${value}\``;
}

function typeOf(node: JsonSchemaNode): string {
  if (node.type === 'array') return `${node.items ? typeOf(node.items) : 'any'}[]`;
  // A union (approval.steps' rules): its members' types, once each.
  if (Array.isArray(node.anyOf) && node.type === undefined) {
    return [...new Set((node.anyOf as JsonSchemaNode[]).map(typeOf))].join(' | ');
  }
  if (node.format) return `${node.type ?? 'any'} (${node.format})`;
  return node.type ?? 'any';
}

function isBound(value: number | undefined): value is number {
  // Unbounded integers come out as Number.MAX_SAFE_INTEGER; that is no real limit.
  return value !== undefined && Math.abs(value) < Number.MAX_SAFE_INTEGER;
}

/** A range as a person reads it; an exclusive bound says so (`> 0`, `0 < … ≤ 1`). */
function rangeOf(
  low: number | undefined,
  high: number | undefined,
  unit = '',
  exclusive: { low?: boolean; high?: boolean } = {},
): string | undefined {
  if (isBound(low) && isBound(high)) {
    if (!exclusive.low && !exclusive.high) return `${unit}${low}–${high}`;
    return `${low} ${exclusive.low ? '<' : '≤'} ${unit || 'value '}${exclusive.high ? '<' : '≤'} ${high}`;
  }
  if (isBound(low)) return `${unit}${exclusive.low ? '>' : '≥'} ${low}`;
  if (isBound(high)) return `${unit}${exclusive.high ? '<' : '≤'} ${high}`;
  return undefined;
}

function allowedOf(node: JsonSchemaNode): string {
  const parts: string[] = [];
  if (node.enum) parts.push(node.enum.map((v) => code(String(v))).join(', '));
  const numeric = rangeOf(
    node.minimum ?? node.exclusiveMinimum,
    node.maximum ?? node.exclusiveMaximum,
    '',
    { low: node.minimum === undefined, high: node.maximum === undefined },
  );
  if (numeric) parts.push(numeric);
  if (node.minLength === 1 && !isBound(node.maxLength)) parts.push('non-empty');
  else {
    const length = rangeOf(node.minLength, node.maxLength, 'length ');
    if (length) parts.push(length);
  }
  if (node.pattern) parts.push(`matches ${code(node.pattern)}`);
  if (node.items) {
    const items = allowedOf(node.items);
    if (items !== '') parts.push(`items: ${items}`);
  }
  return parts.join('; ');
}

function defaultOf(node: JsonSchemaNode): string {
  return node.default === undefined ? 'unset' : code(JSON.stringify(node.default));
}

function cell(text: string): string {
  return text.replace(/\s+/g, ' ').replace(/\|/g, '\\|').trim() || '—';
}

/** Display width as prettier counts it: East Asian wide characters take two columns. */
function displayWidth(text: string): number {
  let width = 0;
  for (const char of text) {
    const point = char.codePointAt(0) ?? 0;
    const wide =
      (point >= 0x1100 && point <= 0x115f) ||
      (point >= 0x2e80 && point <= 0xa4cf) ||
      (point >= 0xac00 && point <= 0xd7a3) ||
      (point >= 0xf900 && point <= 0xfaff) ||
      (point >= 0xfe30 && point <= 0xfe4f) ||
      (point >= 0xff00 && point <= 0xff60) ||
      (point >= 0xffe0 && point <= 0xffe6) ||
      (point >= 0x1f300 && point <= 0x1f64f) ||
      (point >= 0x20000 && point <= 0x3fffd);
    width += wide ? 2 : 1;
  }
  return width;
}

/** A table with padded columns, exactly as prettier formats one, so the reference stays stable. */
function markdownTable(header: readonly string[], rows: readonly (readonly string[])[]): string {
  const widths = header.map((title, column) =>
    Math.max(3, displayWidth(title), ...rows.map((row) => displayWidth(row[column] ?? ''))),
  );
  const line = (cells: readonly string[]): string =>
    `| ${cells.map((text, i) => text + ' '.repeat(widths[i]! - displayWidth(text))).join(' | ')} |`;
  return [line(header), line(widths.map((w) => '-'.repeat(w))), ...rows.map(line)].join('\n');
}

/**
 * The configuration reference (CONFIG_REFERENCE_FILE): how the configuration is found, then one
 * row per key (dotted path, type, default, allowed values, description), generated from the JSON
 * Schema.
 */
export function configReferenceMarkdown(): string {
  const schema = configJsonSchema() as JsonSchemaNode;
  const rows = collectRows(schema, '').filter((row) => row.key !== '$schema');
  const table = markdownTable(
    ['Key', 'Type', 'Default', 'Allowed', 'Description'],
    rows.map(({ key, node }) =>
      [code(key), typeOf(node), defaultOf(node), allowedOf(node), node.description ?? ''].map(cell),
    ),
  );
  return [
    '_Generated from `src/shared/config/schema.ts`; do not edit by hand. ' +
      'Regenerate with `npm run docs:config`._',
    'orq reads the configuration file it is given, else the one named by `ORQ_CONFIG`, else ' +
      '`./orq.config.yaml`, `./orq.config.yml` or `./orq.config.json`; every key is optional. ' +
      'The environment overrides the file: `REDIS_URL` sets `redis.url`, `ORQ_PREFIX` ' +
      '`redis.prefix`, `ORQ_LOG_LEVEL` `logLevel`, and `ORQ__section__key=value` any key, ' +
      'with `__` between the exact key names (`ORQ__refinement__noiseThreshold=4`, ' +
      '`ORQ__planning__reflection__trigger_interval=5`); the value is read as JSON when it ' +
      'parses, else as a string (a string setting keeps the text: `ORQ__redis__prefix=123` is "123"). `orq config check FILE` validates a file, ' +
      '`orq config show` prints the effective configuration and `orq config schema` the ' +
      `JSON Schema (also in \`${CONFIG_SCHEMA_FILE}\`; point \`$schema\` at it for editor ` +
      'completion).',
    table,
  ].join('\n\n');
}
