import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';

const storeDir = fileURLToPath(new URL('../../src/shared/store', import.meta.url));

/**
 * The store's modules and, per module, the store modules it imports: type-only imports and
 * re-exports too, since a circle of types still ties the modules to one another.
 */
function storeImports(): Map<string, string[]> {
  const files = readdirSync(storeDir).filter((name) => name.endsWith('.ts'));
  const graph = new Map<string, string[]>();
  for (const file of files) {
    const path = join(storeDir, file);
    const { importedFiles } = ts.preProcessFile(readFileSync(path, 'utf8'), true, true);
    const targets = importedFiles
      .map(({ fileName }) => fileName)
      .filter((name) => name.startsWith('.'))
      .map((name) => resolve(dirname(path), name.replace(/\.js$/, '.ts')))
      .filter((target) => dirname(target) === storeDir)
      .map((target) => target.slice(storeDir.length + 1));
    graph.set(file, [...new Set(targets)]);
  }
  return graph;
}

/** Every circle of imports, each as the modules on it with the first repeated at the end. */
function importCircles(graph: Map<string, string[]>): string[][] {
  const circles: string[][] = [];
  const done = new Set<string>();
  const visit = (file: string, path: string[]) => {
    const at = path.indexOf(file);
    if (at >= 0) {
      circles.push([...path.slice(at), file]);
      return;
    }
    if (done.has(file)) return;
    for (const next of graph.get(file) ?? []) visit(next, [...path, file]);
    done.add(file);
  };
  for (const file of [...graph.keys()].sort()) visit(file, []);
  return circles;
}

describe('the imports among src/shared/store modules', () => {
  it('are read from every module of the folder', () => {
    const graph = storeImports();
    expect(graph.get('session-store.ts')).toBeDefined();
    expect(graph.get('apply-script.ts')).toContain('usage-store.ts');
  });

  it('form no circle', () => {
    expect(importCircles(storeImports()).map((circle) => circle.join(' -> '))).toEqual([]);
  });
});
