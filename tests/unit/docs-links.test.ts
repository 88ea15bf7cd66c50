import { mkdirSync, readdirSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { brokenLinks } from '../support/markdown-links.js';
import { tempFilesPerFile } from '../support/temp-files.js';

const root = fileURLToPath(new URL('../..', import.meta.url));

/** README.md and every Markdown file under docs/. */
function userDocs(): string[] {
  const docs = readdirSync(join(root, 'docs'), { recursive: true, encoding: 'utf8' })
    .filter((name) => name.endsWith('.md'))
    .map((name) => join('docs', name));
  return ['README.md', ...docs.sort()];
}

describe('the documentation links', () => {
  it('covers the README and the docs pages', () => {
    const files = userDocs();
    expect(files).toContain('README.md');
    expect(files).toContain(join('docs', 'configuration.md'));
    expect(files.length).toBeGreaterThan(10);
  });

  it('has no broken relative link or anchor in README.md and docs/**/*.md', async () => {
    const problems = await brokenLinks(root, userDocs());
    const lines = problems.map((p) => `${relative(root, p.file)}:${p.line}: ${p.message}`);
    expect(lines).toEqual([]);
  });
});

describe('the link check itself', () => {
  const temp = tempFilesPerFile('orq-docs-links-');

  it('finds a link to a missing file, a missing heading here and one in another file', async () => {
    mkdirSync(join(temp.dir, 'docs'));
    temp.write('README.md', '# Title\n\n## Set up\n\nSee [the guide](docs/guide.md).\n');
    temp.write(
      join('docs', 'guide.md'),
      [
        '# Guide',
        '',
        '[missing file](missing.md)',
        '',
        '[missing anchor here](#no-such-heading)',
        '',
        '[missing anchor there](../README.md#tear-down)',
        '',
        '[fine](../README.md#set-up) and [fine too](#guide)',
        '',
      ].join('\n'),
    );
    const problems = await brokenLinks(temp.dir, ['README.md', join('docs', 'guide.md')]);
    const found = problems.map((p) => `${relative(temp.dir, p.file)}:${p.line}`);
    expect(found.sort()).toEqual(['docs/guide.md:3', 'docs/guide.md:5', 'docs/guide.md:7']);
    expect(problems.map((p) => p.message).join('\n')).toMatch(/missing\.md/);
    expect(problems.map((p) => p.message).join('\n')).toMatch(/no-such-heading/);
    expect(problems.map((p) => p.message).join('\n')).toMatch(/tear-down/);
  });
});
