/* global process */
// Module customization hooks of record-loads.mjs (they run on Node's loader thread).
import { appendFileSync } from 'node:fs';

let file;
let sigtermAt;

export function initialize(data) {
  file = data.file;
  sigtermAt = data.sigtermAt;
}

export async function load(url, context, nextLoad) {
  if (file) appendFileSync(file, `${url}\n`);
  if (sigtermAt && url.includes(sigtermAt)) {
    sigtermAt = undefined;
    process.kill(process.pid, 'SIGTERM');
  }
  return nextLoad(url, context);
}
