/**
 * A minimal SVG bar chart writer (no chart library): panels of grouped bars with value labels,
 * optional reference lines, laid out in a grid under one title. Pure: returns the SVG text.
 */

export interface Bar {
  /** Series name: bars with the same label share a colour and a legend entry. */
  series: string;
  value: number;
  /** Text above the bar; the formatted value when absent. */
  label?: string;
}

export interface BarGroup {
  label: string;
  bars: Bar[];
}

export interface RefLine {
  value: number;
  label: string;
}

export interface BarPanel {
  title: string;
  unit: string;
  groups: BarGroup[];
  refLines?: RefLine[];
  /** Lowest top of the y axis (e.g. 1 for a ratio whose ideal is 1). */
  minTop?: number;
  note?: string;
}

export interface Figure {
  title: string;
  subtitle: string;
  panels: BarPanel[];
  columns?: number;
}

const PALETTE = ['#3b6fb6', '#e08a2e', '#4a9a5b', '#b64a4a', '#7d5ba6', '#5aa3a8', '#8c6d46'];
const PANEL_W = 560;
const PANEL_H = 300;
const MARGIN = { top: 42, right: 16, bottom: 58, left: 58 };

export function escapeXml(text: string): string {
  return text.replace(/[<>&'"]/g, (c) => `&#${c.charCodeAt(0)};`);
}

/** Axis ticks: as few decimals as the step needs (1.25 keeps two, 2.5 one, 250 none). */
function formatTick(value: number, top: number): string {
  if (top >= 10_000) return `${Number((value / 1000).toFixed(2))}k`;
  const step = top / 4;
  let decimals = 0;
  while (decimals < 3 && Math.abs(step * 10 ** decimals - Math.round(step * 10 ** decimals)) > 1e-9)
    decimals += 1;
  return value.toFixed(decimals);
}

export function formatValue(value: number): string {
  if (!Number.isFinite(value)) return 'n/a';
  if (value === 0) return '0';
  const abs = Math.abs(value);
  if (abs >= 10_000) return `${(value / 1000).toFixed(0)}k`;
  if (abs >= 100) return value.toFixed(0);
  if (abs >= 10) return value.toFixed(1);
  return value.toFixed(abs >= 1 ? 2 : 3);
}

/** A round axis top at or above `max`: 1, 2, 2.5 or 5 times a power of ten. */
export function niceTop(max: number): number {
  if (!(max > 0)) return 1;
  const power = 10 ** Math.floor(Math.log10(max));
  for (const step of [1, 2, 2.5, 5, 10]) if (step * power >= max) return step * power;
  return 10 * power;
}

function text(
  x: number,
  y: number,
  content: string,
  attrs: Record<string, string | number> = {},
): string {
  const extra = Object.entries(attrs)
    .map(([k, v]) => ` ${k}="${escapeXml(String(v))}"`)
    .join('');
  return `<text x="${x.toFixed(1)}" y="${y.toFixed(1)}"${extra}>${escapeXml(content)}</text>`;
}

function seriesColors(panel: BarPanel): Map<string, string> {
  const colors = new Map<string, string>();
  for (const group of panel.groups) {
    for (const bar of group.bars) {
      if (!colors.has(bar.series))
        colors.set(bar.series, PALETTE[colors.size % PALETTE.length] as string);
    }
  }
  return colors;
}

export function renderPanel(panel: BarPanel, x0: number, y0: number): string {
  const out: string[] = [`<g transform="translate(${x0},${y0})">`];
  const plotW = PANEL_W - MARGIN.left - MARGIN.right;
  const plotH = PANEL_H - MARGIN.top - MARGIN.bottom;
  const values = panel.groups.flatMap((g) => g.bars.map((b) => b.value));
  const refs = panel.refLines ?? [];
  const top = niceTop(
    Math.max(panel.minTop ?? 0, ...values.filter(Number.isFinite), ...refs.map((r) => r.value)),
  );
  const y = (v: number) => MARGIN.top + plotH - (Math.max(0, v) / top) * plotH;
  out.push(`<rect width="${PANEL_W}" height="${PANEL_H}" fill="#fff" stroke="#ddd"/>`);
  out.push(text(12, 20, panel.title, { 'font-weight': 'bold', 'font-size': 14 }));
  if (panel.note) out.push(text(12, 35, panel.note, { 'font-size': 11, fill: '#666' }));

  for (let i = 0; i <= 4; i += 1) {
    const v = (top * i) / 4;
    out.push(
      `<line x1="${MARGIN.left}" x2="${MARGIN.left + plotW}" y1="${y(v).toFixed(1)}" y2="${y(v).toFixed(1)}" stroke="#eee"/>`,
      text(MARGIN.left - 6, y(v) + 4, formatTick(v, top), {
        'text-anchor': 'end',
        'font-size': 11,
      }),
    );
  }
  out.push(
    text(14, MARGIN.top + plotH / 2, panel.unit, {
      'font-size': 11,
      'text-anchor': 'middle',
      transform: `rotate(-90 14 ${MARGIN.top + plotH / 2})`,
    }),
  );

  const colors = seriesColors(panel);
  const groupW = plotW / Math.max(1, panel.groups.length);
  panel.groups.forEach((group, gi) => {
    const gx = MARGIN.left + gi * groupW;
    const barW = Math.min(60, (groupW * 0.8) / Math.max(1, group.bars.length));
    const start = gx + (groupW - barW * group.bars.length) / 2;
    group.bars.forEach((bar, bi) => {
      const bx = start + bi * barW;
      const by = y(Number.isFinite(bar.value) ? bar.value : 0);
      const h = MARGIN.top + plotH - by;
      out.push(
        `<rect x="${(bx + 1).toFixed(1)}" y="${by.toFixed(1)}" width="${(barW - 2).toFixed(1)}" height="${h.toFixed(1)}" fill="${colors.get(bar.series)}"/>`,
        text(bx + barW / 2, by - 4, bar.label ?? formatValue(bar.value), {
          'text-anchor': 'middle',
          // Narrow bars get smaller labels so neighbours do not overlap.
          'font-size': Math.max(7, Math.min(10, barW / 2.8)).toFixed(1),
        }),
      );
    });
    out.push(
      text(gx + groupW / 2, MARGIN.top + plotH + 16, group.label, {
        'text-anchor': 'middle',
        'font-size': 11,
      }),
    );
  });

  for (const ref of refs) {
    out.push(
      `<line x1="${MARGIN.left}" x2="${MARGIN.left + plotW}" y1="${y(ref.value).toFixed(1)}" y2="${y(ref.value).toFixed(1)}" stroke="#b00" stroke-dasharray="5 4"/>`,
      text(MARGIN.left + plotW - 2, y(ref.value) + 12, ref.label, {
        'text-anchor': 'end',
        'font-size': 10,
        fill: '#b00',
      }),
    );
  }

  // Legend under the axis labels.
  let lx = MARGIN.left;
  for (const [series, color] of colors) {
    out.push(
      `<rect x="${lx}" y="${PANEL_H - 18}" width="10" height="10" fill="${color}"/>`,
      text(lx + 14, PANEL_H - 9, series, { 'font-size': 11 }),
    );
    lx += 24 + series.length * 6.2;
  }
  out.push('</g>');
  return out.join('\n');
}

export function renderFigure(figure: Figure): string {
  const columns = figure.columns ?? 2;
  const rows = Math.max(1, Math.ceil(figure.panels.length / columns));
  const gap = 14;
  const header = 56;
  const width = columns * PANEL_W + (columns + 1) * gap;
  const height = header + rows * (PANEL_H + gap) + gap;
  const body = figure.panels.map((panel, i) =>
    renderPanel(
      panel,
      gap + (i % columns) * (PANEL_W + gap),
      header + Math.floor(i / columns) * (PANEL_H + gap),
    ),
  );
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="Helvetica, Arial, sans-serif">`,
    `<rect width="${width}" height="${height}" fill="#f7f7f7"/>`,
    text(gap, 26, figure.title, { 'font-size': 18, 'font-weight': 'bold' }),
    text(gap, 46, figure.subtitle, { 'font-size': 12, fill: '#555' }),
    ...body,
    '</svg>',
    '',
  ].join('\n');
}
