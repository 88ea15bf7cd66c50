import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, normalize, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';

/**
 * Where code lives (DESIGN.md, "Layout"), checked on the source itself: `src/shared` holds what
 * both sides use and imports neither side; producers never reach into the workers' model layer;
 * no modules import each other in a circle; no function grows into a closure a reader cannot
 * list (issue 52).
 */

const root = join(dirname(fileURLToPath(import.meta.url)), '../..');

function sourceFiles(dir: string): string[] {
  return readdirSync(join(root, dir), { withFileTypes: true }).flatMap((entry) => {
    const path = `${dir}/${entry.name}`;
    if (entry.isDirectory()) return sourceFiles(path);
    return entry.name.endsWith('.ts') ? [path] : [];
  });
}

const files = sourceFiles('src');
const parsed = new Map(
  files.map((file) => [
    file,
    ts.createSourceFile(file, readFileSync(join(root, file), 'utf8'), ts.ScriptTarget.Latest, true),
  ]),
);

/** The project files a file imports or re-exports, type-only imports included. */
function importsOf(file: string): string[] {
  const found: string[] = [];
  for (const statement of parsed.get(file)!.statements) {
    if (!ts.isImportDeclaration(statement) && !ts.isExportDeclaration(statement)) continue;
    const specifier = statement.moduleSpecifier;
    if (!specifier || !ts.isStringLiteral(specifier) || !specifier.text.startsWith('.')) continue;
    found.push(normalize(join(dirname(file), specifier.text)).replace(/\.js$/, '.ts'));
  }
  return found;
}

const graph = new Map(files.map((file) => [file, importsOf(file)]));

/** Groups of modules that import each other in a circle (Tarjan's strongly connected parts). */
function circles(): string[][] {
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const found: string[][] = [];
  const visit = (file: string) => {
    index.set(file, index.size);
    low.set(file, index.get(file)!);
    stack.push(file);
    onStack.add(file);
    for (const next of graph.get(file) ?? []) {
      if (!graph.has(next)) continue;
      if (!index.has(next)) {
        visit(next);
        low.set(file, Math.min(low.get(file)!, low.get(next)!));
      } else if (onStack.has(next)) {
        low.set(file, Math.min(low.get(file)!, index.get(next)!));
      }
    }
    if (low.get(file) !== index.get(file)) return;
    const group: string[] = [];
    let member: string;
    do {
      member = stack.pop()!;
      onStack.delete(member);
      group.push(member);
    } while (member !== file);
    if (group.length > 1) found.push(group.sort());
  };
  for (const file of files) if (!index.has(file)) visit(file);
  return found;
}

const importsUnder = (from: string, to: string) =>
  files
    .filter((file) => file.startsWith(from))
    .flatMap((file) => importsOf(file).filter((target) => target.startsWith(to)))
    .map((target) => relative(root, join(root, target)));

describe('the source layout', () => {
  it('has no modules that import each other in a circle', () => {
    expect(circles()).toEqual([]);
  });

  it('keeps src/shared free of imports from either side', () => {
    expect(importsUnder('src/shared/', 'src/workers/')).toEqual([]);
    expect(importsUnder('src/shared/', 'src/producers/')).toEqual([]);
  });

  it("keeps producers out of the workers' model layer", () => {
    expect(importsUnder('src/producers/', 'src/workers/llm/')).toEqual([]);
  });

  it('has no function longer than 300 lines', () => {
    const long: string[] = [];
    for (const [file, source] of parsed) {
      const visit = (node: ts.Node) => {
        if (ts.isFunctionLike(node) && 'body' in node && node.body) {
          const start = source.getLineAndCharacterOfPosition(node.getStart()).line;
          const end = source.getLineAndCharacterOfPosition(node.getEnd()).line;
          if (end - start > 300) long.push(`${file}:${start + 1} (${end - start} lines)`);
        }
        ts.forEachChild(node, visit);
      };
      visit(source);
    }
    expect(long).toEqual([]);
  });
});
