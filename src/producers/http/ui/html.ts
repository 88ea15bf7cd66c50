/**
 * Safe HTML from template literals: every interpolated value is escaped unless it is already
 * Html (made by `html` or `raw`). Arrays are joined, null/undefined/false render nothing.
 */
export class Html {
  constructor(readonly text: string) {}
  toString(): string {
    return this.text;
  }
}

const ESCAPES: Record<string, string> = {
  '&': '&amp;',
  '<': '&lt;',
  '>': '&gt;',
  '"': '&quot;',
  "'": '&#39;',
};

export function escapeHtml(value: string): string {
  return value.replace(/[&<>"']/g, (c) => ESCAPES[c]!);
}

type Part = Html | string | number | boolean | null | undefined | readonly Part[];

function render(part: Part): string {
  if (part === null || part === undefined || part === false) return '';
  if (part instanceof Html) return part.text;
  if (Array.isArray(part)) return part.map(render).join('');
  return escapeHtml(String(part));
}

export function html(strings: TemplateStringsArray, ...values: Part[]): Html {
  let text = strings[0]!;
  values.forEach((value, i) => {
    text += render(value) + strings[i + 1]!;
  });
  return new Html(text);
}

/** Markup that is trusted as it is (our own SVG, built from escaped parts). */
export const raw = (text: string): Html => new Html(text);

export const UI_PATH = '/ui';

/** The page shell: one stylesheet and one script, both served by this server (no CDN). */
export function page(title: string, body: Html, options: { live?: string } = {}): string {
  return html`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>${title} · orq</title>
<link rel="icon" href="data:,">
<link rel="stylesheet" href="${UI_PATH}/assets/ui.css">
<script src="${UI_PATH}/assets/ui.js" defer></script>
</head>
<body${options.live ? html` data-live="${options.live}"` : ''}>
<header class="top"><a href="${UI_PATH}">orq sessions</a> <a href="/admin/queues">Bull Board</a> <a href="/docs">API</a></header>
<main id="live">
${body}
</main>
</body>
</html>
`.text;
}

/** A short age: 42s, 5m, 3h, 2d. */
export function age(iso: string, now: number): string {
  const seconds = Math.max(0, Math.round((now - Date.parse(iso)) / 1000));
  if (seconds < 60) return `${seconds}s`;
  if (seconds < 3600) return `${Math.floor(seconds / 60)}m`;
  if (seconds < 86_400) return `${Math.floor(seconds / 3600)}h`;
  return `${Math.floor(seconds / 86_400)}d`;
}

export const usd = (value: number): string => `$${value.toFixed(4)}`;

export const stateBadge = (state: string): Html =>
  html`<span class="state state-${state}">${state}</span>`;
