import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { roundAll } from './stats.js';

/** One measurement: printed as one JSON line on stdout and kept for the results file. */
export interface Measurement {
  name: string;
  value: number;
  unit: string;
  [context: string]: unknown;
}

export interface RunInfo {
  startedAt: string;
  finishedAt?: string;
  durationS?: number;
  quick: boolean;
  only?: string[];
  machine: Record<string, unknown>;
}

/** Collects measurements; stdout carries only the JSON lines, progress goes to stderr. */
export class Reporter {
  readonly measurements: Measurement[] = [];

  record(measurement: Measurement): void {
    const rounded = roundAll(measurement);
    this.measurements.push(rounded);
    process.stdout.write(`${JSON.stringify(rounded)}\n`);
  }

  find(name: string): Measurement | undefined {
    return this.measurements.find((m) => m.name === name);
  }
}

export function log(message: string): void {
  process.stderr.write(`[bench] ${message}\n`);
}

/** `2026-11-01T04-50-00Z`: an ISO timestamp usable as a file name everywhere. */
export function fileStamp(date: Date): string {
  return date
    .toISOString()
    .replace(/\.\d+Z$/, 'Z')
    .replace(/:/g, '-');
}

/** Writes `<timestamp>.json`, `latest.json` and `latest.svg` into `dir`; returns their paths. */
export function writeResults(
  dir: string,
  run: RunInfo,
  measurements: Measurement[],
  svg: string,
): string[] {
  mkdirSync(dir, { recursive: true });
  const body = `${JSON.stringify({ run, measurements }, null, 1)}\n`;
  const stamped = join(dir, `${fileStamp(new Date(run.startedAt))}.json`);
  const latest = join(dir, 'latest.json');
  const chart = join(dir, 'latest.svg');
  writeFileSync(stamped, body);
  writeFileSync(latest, body);
  writeFileSync(chart, svg);
  return [stamped, latest, chart];
}
