import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  CONFIG_REFERENCE_FILE,
  CONFIG_SCHEMA_FILE,
  configJsonSchema,
  configReferenceMarkdown,
} from '../../src/shared/config/json-schema.js';
import { parseConfig } from '../../src/shared/config/load.js';
import { OrqConfig } from '../../src/shared/config/schema.js';

interface Node {
  type?: string;
  default?: unknown;
  properties?: Record<string, Node>;
  additionalProperties?: unknown;
}

const root = fileURLToPath(new URL('../..', import.meta.url));
const schema = configJsonSchema() as Node & Record<string, unknown>;

/** Every key path of the zod schema, sections included. */
function zodKeyPaths(type: z.core.$ZodType, prefix: string[] = []): string[][] {
  let inner = type;
  while (['default', 'prefault', 'optional'].includes(inner._zod.def.type)) {
    inner = (inner._zod.def as unknown as { innerType: z.core.$ZodType }).innerType;
  }
  if (!(inner instanceof z.ZodObject)) return [];
  return Object.entries(inner.shape).flatMap(([key, child]) => [
    [...prefix, key],
    ...zodKeyPaths(child as z.core.$ZodType, [...prefix, key]),
  ]);
}

function nodeAt(path: readonly string[]): Node | undefined {
  let node: Node | undefined = schema;
  for (const key of path) node = node?.properties?.[key];
  return node;
}

/** Leaf values of the parsed defaults, by path. */
function leaves(value: unknown, prefix: string[] = []): [string[], unknown][] {
  if (typeof value === 'object' && value !== null && !Array.isArray(value)) {
    return Object.entries(value).flatMap(([key, child]) => leaves(child, [...prefix, key]));
  }
  return [[prefix, value]];
}

describe('the generated JSON Schema', () => {
  it('is draft 2020-12 with an id and a title', () => {
    expect(schema.$schema).toBe('https://json-schema.org/draft/2020-12/schema');
    expect(schema.$id).toBe('urn:orq:config');
    expect(schema.title).toBe('orq configuration');
    expect(schema.type).toBe('object');
  });

  it('has every key of OrqConfig, at every depth', () => {
    const paths = zodKeyPaths(OrqConfig);
    expect(paths.length).toBeGreaterThan(60);
    const missing = paths.filter((path) => nodeAt(path) === undefined).map((p) => p.join('.'));
    expect(missing).toEqual([]);
  });

  it('has no key that OrqConfig lacks', () => {
    const known = new Set(zodKeyPaths(OrqConfig).map((p) => p.join('.')));
    const walk = (node: Node, prefix: string[]): string[] =>
      Object.entries(node.properties ?? {}).flatMap(([key, child]) => [
        [...prefix, key].join('.'),
        ...walk(child, [...prefix, key]),
      ]);
    expect(walk(schema, []).filter((path) => !known.has(path))).toEqual([]);
  });

  it('gives every key the default that parseConfig fills in', () => {
    const defaults = leaves(parseConfig({}));
    expect(defaults.length).toBeGreaterThan(40);
    for (const [path, value] of defaults) {
      expect(nodeAt(path)?.default, path.join('.')).toEqual(value);
    }
  });

  it("states the seeds' headline defaults", () => {
    expect(nodeAt(['refinement', 'maxRefinementAttempts'])?.default).toBe(2);
    expect(nodeAt(['refinement', 'noiseThreshold'])).toMatchObject({
      default: 3,
      minimum: 1,
      maximum: 10,
    });
    expect(nodeAt(['replanning', 'maxIterations'])?.default).toBe(3);
    expect(nodeAt(['planning', 'reflection', 'trigger_interval'])?.default).toBe(3);
  });

  it('rejects unknown keys in every section, like the zod schema', () => {
    const sections = zodKeyPaths(OrqConfig).filter((path) => nodeAt(path)?.type === 'object');
    expect(sections.length).toBeGreaterThan(10);
    expect(schema.additionalProperties).toBe(false);
    for (const path of sections) {
      const extra = nodeAt(path)?.additionalProperties;
      // A map keyed by the user (budget.prices by model name, tenants.weights by tenant) takes
      // any key; its values are strict objects, or plain numbers.
      const value = extra as Node;
      const strict =
        typeof extra !== 'object'
          ? extra
          : value.type === 'number'
            ? false
            : value.additionalProperties;
      expect(strict, path.join('.')).toBe(false);
    }
  });

  it('requires no key of the sections every file has, so an empty file is valid', () => {
    // Keys inside an optional section or a list item (execution.command.template, an MCP
    // server's command) may be required: they are asked for only once the user opts in.
    const sections = zodKeyPaths(OrqConfig).filter(
      (path) => nodeAt(path)?.type === 'object' && nodeAt(path)?.default !== undefined,
    );
    expect(sections.length).toBeGreaterThan(10);
    expect(schema.required).toBeUndefined();
    for (const path of sections) {
      expect((nodeAt(path) as Record<string, unknown>).required, path.join('.')).toBeUndefined();
    }
  });

  it(`is what ${CONFIG_SCHEMA_FILE} holds (run \`npm run docs:config\` if not)`, () => {
    const shipped: unknown = JSON.parse(readFileSync(join(root, CONFIG_SCHEMA_FILE), 'utf8'));
    expect(shipped).toEqual(configJsonSchema());
  });
});

describe('the configuration reference', () => {
  const markdown = configReferenceMarkdown();

  it('has one row per key with its type, default and range', () => {
    expect(markdown).toMatch(
      /\| `refinement\.noiseThreshold` +\| number +\| `3` +\| 1–10 +\| Score differences/,
    );
    expect(markdown).toMatch(/\| `planning\.revision\.max_revisions` +\| integer +\| `3` +\|/);
    expect(markdown).toMatch(/\| `logLevel` +\| string +\| `"info"` +\| `fatal`, `error`/);
    // A bound the schema excludes reads as one: maxUsd must be more than 0.
    expect(markdown).toMatch(/\| `budget\.maxUsd` +\| number +\| unset +\| > 0 +\|/);
  });

  it('lists the identical per-role LLM overrides once', () => {
    expect(markdown).toContain('`llm.{planner,judge,worker,replanner}.model`');
    expect(markdown).not.toContain('`llm.judge.model`');
  });

  it('tells how to regenerate it', () => {
    expect(markdown).toContain('npm run docs:config');
  });

  it(`is what ${CONFIG_REFERENCE_FILE} holds between its markers (run \`npm run docs:config\` if not)`, () => {
    const reference = readFileSync(join(root, CONFIG_REFERENCE_FILE), 'utf8');
    const match = /<!-- config-reference:start -->\n([\s\S]*?)<!-- config-reference:end -->/.exec(
      reference,
    );
    expect(match, `${CONFIG_REFERENCE_FILE} has the config-reference markers`).not.toBeNull();
    expect(match?.[1]?.trim()).toBe(markdown);
  });

  it('is linked from README.md, which no longer holds a copy', () => {
    const readme = readFileSync(join(root, 'README.md'), 'utf8');
    expect(readme).toContain(`](${CONFIG_REFERENCE_FILE})`);
    expect(readme).not.toContain('<!-- config-reference:start -->');
  });
});
