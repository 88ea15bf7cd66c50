/** Server-sent-event framing (https://html.spec.whatwg.org/#server-sent-events), kept pure. */

export interface SseEvent {
  id?: string;
  event?: string;
  data: string;
}

/** One event; every line of `data` gets its own `data:` field, so newlines survive. */
export function formatSseEvent(event: SseEvent): string {
  let text = '';
  if (event.id !== undefined) text += `id: ${event.id}\n`;
  if (event.event !== undefined) text += `event: ${event.event}\n`;
  for (const line of event.data.split(/\r\n|\r|\n/)) text += `data: ${line}\n`;
  return `${text}\n`;
}

/** A comment line: keeps proxies from closing an idle stream, ignored by EventSource. */
export const SSE_HEARTBEAT = ': keep-alive\n\n';

/** Parses a text/event-stream body into events (for tests and Node consumers). */
export function parseSseStream(text: string): SseEvent[] {
  const events: SseEvent[] = [];
  for (const block of text.split(/\r?\n\r?\n/)) {
    const data: string[] = [];
    const event: Partial<SseEvent> = {};
    for (const line of block.split(/\r?\n/)) {
      if (line === '' || line.startsWith(':')) continue;
      const index = line.indexOf(':');
      const field = index === -1 ? line : line.slice(0, index);
      const value = index === -1 ? '' : line.slice(index + 1).replace(/^ /, '');
      if (field === 'data') data.push(value);
      else if (field === 'id') event.id = value;
      else if (field === 'event') event.event = value;
    }
    if (data.length > 0 || event.id !== undefined || event.event !== undefined) {
      events.push({ ...event, data: data.join('\n') });
    }
  }
  return events;
}
