import type { Redis } from 'ioredis';
import { bullPrefix } from '../../src/shared/queues.js';
import { median } from './stats.js';

/**
 * Where a task's time goes, per tenant, from the queues' BullMQ event streams (a debugging aid
 * of the fair-quota bench, issue 46): for each task's first attempt, its work job from added to
 * first active (the queue) and on to completed (quota waits, hand-backs and the call), then its
 * judge job the same way, and the coordinator's event. The streams are read as the run goes, so
 * BullMQ's trimming (10,000 events a queue) loses nothing.
 */

/** One job's events: type → times (ms, from the stream ids). */
type JobEvents = Map<string, number[]>;

const QUEUES = ['work', 'judge', 'coordinator'] as const;
/** The work queue's head is noted once this many jobs wait in it (every plan released). */
const HEAD_AT = 150;

export class JobStages {
  private readonly jobs = new Map<string, JobEvents>();
  private readonly last = new Map<string, string>();
  private timer: NodeJS.Timeout | undefined;
  /** The work queue's first jobs (their ids), once it first held `HEAD_AT` jobs waiting. */
  private head: string[] | undefined;
  private reading: Promise<void> = Promise.resolve();

  constructor(
    private readonly admin: Redis,
    private readonly prefix: string,
  ) {}

  start(everyMs = 500): void {
    this.timer = setInterval(() => {
      this.reading = this.reading.then(() => this.read()).catch(() => undefined);
    }, everyMs);
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
    await this.reading;
    await this.read();
  }

  private async read(): Promise<void> {
    if (!this.head) {
      const key = `${bullPrefix(this.prefix)}:work:prioritized`;
      if ((await this.admin.zcard(key)) >= HEAD_AT) this.head = await this.admin.zrange(key, 0, 99);
    }
    for (const queue of QUEUES) {
      const key = `${bullPrefix(this.prefix)}:${queue}:events`;
      const from = this.last.get(queue);
      const entries = await this.admin.xrange(key, from ? `(${from}` : '-', '+', 'COUNT', 20_000);
      for (const [id, fields] of entries) {
        this.last.set(queue, id);
        const at = Number(id.split('-')[0]);
        const value = (name: string) => fields[fields.indexOf(name) + 1];
        const event = value('event');
        const jobId = value('jobId');
        if (!event || !jobId || fields.indexOf('jobId') < 0) continue;
        let events = this.jobs.get(jobId);
        if (!events) this.jobs.set(jobId, (events = new Map()));
        events.set(event, [...(events.get(event) ?? []), at]);
      }
    }
  }

  private merged(id: string): JobEvents | undefined {
    const parts = [...this.jobs.entries()]
      .filter(([jobId]) => jobId === id || jobId.startsWith(`${id}|f`))
      .map(([, events]) => events);
    return mergeEvents(parts);
  }

  /**
   * A session's tasks, one line each: when (ms after `since`) its work and judge jobs were
   * taken, handed back and completed.
   */
  timeline(sessionId: string, since: number): string {
    const lines: string[] = [];
    for (const [jobId, events] of this.jobs) {
      const [kind, sid, tid, attempt] = jobId.split('|');
      if (kind !== 'work' || sid !== sessionId || attempt !== '1' || !tid) continue;
      const judge = this.merged(`judge-task|${sid}|${tid}|1`);
      const at = (e: JobEvents | undefined, type: string) =>
        (e?.get(type) ?? []).map((t) => t - since).join(',') || '-';
      lines.push(
        `${tid}: work added ${at(events, 'added')} active ${at(events, 'active')} delayed ${at(events, 'delayed')} done ${at(events, 'completed')}; judge active ${at(judge, 'active')} delayed ${at(judge, 'delayed')} done ${at(judge, 'completed')}`,
      );
    }
    return lines.sort().join('\n');
  }

  /**
   * Per tenant: how often its work and judge jobs were taken (active), handed back (delayed)
   * and completed between `from` and `to`; and medians (and 90th percentiles) of each stage, in
   * ms, over the tasks whose work job completed then. `tenantOf` maps a session id to its tenant.
   */
  summary(tenantOf: (sessionId: string) => string | undefined, from: number, to: number): string {
    const counts = new Map<string, Record<string, number>>();
    for (const [jobId, events] of this.jobs) {
      const [kind, sid] = jobId.split('|');
      const tenant = sid ? tenantOf(sid) : undefined;
      if (!tenant || (kind !== 'work' && kind !== 'judge-task')) continue;
      const row = counts.get(tenant) ?? {};
      counts.set(tenant, row);
      for (const type of ['active', 'delayed', 'completed']) {
        const n = (events.get(type) ?? []).filter((at) => at >= from && at <= to).length;
        row[`${kind}_${type}`] = (row[`${kind}_${type}`] ?? 0) + n;
      }
    }
    const rows = new Map<string, Record<string, number[]>>();
    for (const [jobId, events] of this.jobs) {
      const [kind, sid, tid, attempt] = jobId.split('|');
      if (kind !== 'work' || attempt !== '1' || !sid || !tid) continue;
      const added = events.get('added')?.[0];
      const done = events.get('completed')?.[0];
      if (added === undefined || done === undefined || done < from || done > to) continue;
      const tenant = tenantOf(sid);
      if (!tenant) continue;
      // A work job taken again after a hand-back takes a new fence: its judge job's id says so.
      const judge = this.merged(`judge-task|${sid}|${tid}|1`);
      const judged = this.merged(`ev-task-judged|${sid}|${tid}|1`);
      const first = (e: JobEvents | undefined, type: string) => e?.get(type)?.[0];
      const stages: Record<string, number | undefined> = {
        work_queue: gap(added, first(events, 'active')),
        work_run: gap(first(events, 'active'), first(events, 'completed')),
        work_handbacks: events.get('delayed')?.length ?? 0,
        // The worker hands its judge job off in its own script, which posts no `added`.
        judge_queue: gap(first(events, 'completed'), first(judge, 'active')),
        judge_run: gap(first(judge, 'active'), first(judge, 'completed')),
        judge_handbacks: judge?.get('delayed')?.length ?? 0,
        coordinator: gap(first(judged, 'added'), first(judged, 'completed')),
        total: gap(added, first(judged, 'completed')),
      };
      const row = rows.get(tenant) ?? {};
      rows.set(tenant, row);
      for (const [stage, ms] of Object.entries(stages)) {
        if (ms !== undefined) (row[stage] ??= []).push(ms);
      }
    }
    const head = new Map<string, number>();
    for (const id of this.head ?? []) {
      const tenant = tenantOf(id.split('|')[1] ?? '') ?? '?';
      head.set(tenant, (head.get(tenant) ?? 0) + 1);
    }
    const heads = [...head.entries()].map(([tenant, n]) => `${tenant} ${n}`).join(', ');
    return `the work queue's first 100 jobs once ${HEAD_AT} waited: ${heads}\n${[...rows.entries()]
      .sort(([a], [b]) => a.localeCompare(b))
      .map(([tenant, row]) => {
        const cells = Object.entries(row).map(
          ([stage, values]) =>
            `${stage} ${median(values).toFixed(0)}/${percentile(values, 0.9).toFixed(0)}`,
        );
        const count = Object.entries(counts.get(tenant) ?? {}).map(([k, n]) => `${k} ${n}`);
        return `tenant ${tenant}: ${count.join(', ')}; ${row.work_queue?.length ?? 0} tasks, median/p90 ms: ${cells.join(', ')}`;
      })
      .join('\n')}`;
  }
}

/** The events of a job and its later fences' (`<id>|f<n>`), merged in time order. */
function mergeEvents(parts: JobEvents[]): JobEvents | undefined {
  if (parts.length === 0) return undefined;
  const merged: JobEvents = new Map();
  for (const part of parts) {
    for (const [type, times] of part) merged.set(type, [...(merged.get(type) ?? []), ...times]);
  }
  for (const times of merged.values()) times.sort((a, b) => a - b);
  return merged;
}

function gap(from: number | undefined, to: number | undefined): number | undefined {
  return from === undefined || to === undefined ? undefined : to - from;
}

function percentile(values: number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))] ?? 0;
}
