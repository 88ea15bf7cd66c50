import { Graph, layout } from '@dagrejs/dagre';
import type { Task } from '../../../shared/domain/task.js';
import { escapeHtml } from './html.js';

const NODE_WIDTH = 210;
const NODE_HEIGHT = 54;
const TITLE_CHARS = 28;
const MARGIN = 8;

export interface GraphEdge {
  from: string;
  to: string;
  /** depends: `to` waits for `from`; replaced: the replan put `to` in `from`'s place. */
  kind: 'depends' | 'replaced';
}

/**
 * The edges drawn: each task's current dependencies (rewired by a replan to the subtasks), and
 * from a task replaced by a replan to the subtasks that replaced it. Pure, for the unit tests.
 */
export function graphEdges(tasks: readonly Task[]): GraphEdge[] {
  const known = new Set(tasks.map((t) => t.id));
  const edges: GraphEdge[] = [];
  for (const task of tasks) {
    for (const dep of task.dependencies) {
      if (known.has(dep)) edges.push({ from: dep, to: task.id, kind: 'depends' });
    }
    for (const next of task.replanningInfo?.replacedBy ?? []) {
      if (known.has(next)) edges.push({ from: task.id, to: next, kind: 'replaced' });
    }
  }
  return edges;
}

const short = (text: string): string =>
  text.length > TITLE_CHARS ? `${text.slice(0, TITLE_CHARS - 1)}…` : text;

/**
 * The session's tasks as an SVG DAG, laid out by dagre (left to right). Each node is a link to
 * the task's page and carries its id and state (`data-task`, `data-state`) for the tests and the
 * styles; the live script swaps the whole SVG when the server renders it again.
 */
export function taskGraphSvg(tasks: readonly Task[], taskHref: (id: string) => string): string {
  if (tasks.length === 0) return '<p class="muted">No tasks yet: the plan is not accepted.</p>';
  const graph = new Graph({ multigraph: true });
  graph.setGraph({ rankdir: 'LR', nodesep: 24, ranksep: 56 });
  graph.setDefaultEdgeLabel(() => ({}));
  for (const task of tasks) graph.setNode(task.id, { width: NODE_WIDTH, height: NODE_HEIGHT });
  const edges = graphEdges(tasks);
  edges.forEach((edge, i) => graph.setEdge(edge.from, edge.to, {}, `e${i}`));
  layout(graph);

  // dagre's graph size leaves out edges that bend around a rank: the view box takes them in.
  const xs: number[] = [];
  const ys: number[] = [];
  const routes = edges.map((edge, i) => {
    const label = graph.edge(edge.from, edge.to, `e${i}`) as {
      points?: { x: number; y: number }[];
    };
    const points = label.points ?? [];
    for (const p of points) {
      xs.push(p.x);
      ys.push(p.y);
    }
    return points;
  });
  for (const task of tasks) {
    const { x, y } = graph.node(task.id) as { x: number; y: number };
    xs.push(x - NODE_WIDTH / 2, x + NODE_WIDTH / 2);
    ys.push(y - NODE_HEIGHT / 2, y + NODE_HEIGHT / 2);
  }
  const left = Math.floor(Math.min(...xs) - MARGIN);
  const top = Math.floor(Math.min(...ys) - MARGIN);
  const width = Math.ceil(Math.max(...xs) + MARGIN) - left;
  const height = Math.ceil(Math.max(...ys) + MARGIN) - top;
  const paths = edges.map((edge, i) => {
    const points = routes[i]!;
    const d = points.map((p, j) => `${j === 0 ? 'M' : 'L'}${p.x.toFixed(1)},${p.y.toFixed(1)}`);
    return `<path class="edge edge-${edge.kind}" data-from="${escapeHtml(edge.from)}" data-to="${escapeHtml(edge.to)}" d="${d.join(' ')}" marker-end="url(#arrow)"/>`;
  });
  const nodes = tasks.map((task) => {
    const { x, y } = graph.node(task.id) as { x: number; y: number };
    const left = x - NODE_WIDTH / 2;
    const top = y - NODE_HEIGHT / 2;
    const id = escapeHtml(task.id);
    return `<a href="${escapeHtml(taskHref(task.id))}" class="node state-${task.state}" data-task="${id}" data-state="${task.state}">
<title>${id}: ${escapeHtml(task.title)} (${task.state})</title>
<rect x="${left.toFixed(1)}" y="${top.toFixed(1)}" width="${NODE_WIDTH}" height="${NODE_HEIGHT}" rx="6"/>
<text x="${(left + 8).toFixed(1)}" y="${(top + 20).toFixed(1)}" class="node-id">${id} · ${task.state}</text>
<text x="${(left + 8).toFixed(1)}" y="${(top + 40).toFixed(1)}">${escapeHtml(short(task.title))}</text>
</a>`;
  });
  return `<svg class="graph" role="group" aria-label="task graph" viewBox="${left} ${top} ${width} ${height}" width="${width}" height="${height}" xmlns="http://www.w3.org/2000/svg">
<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" orient="auto"><path d="M0,0 L10,5 L0,10 z"/></marker></defs>
${paths.join('\n')}
${nodes.join('\n')}
</svg>`;
}
